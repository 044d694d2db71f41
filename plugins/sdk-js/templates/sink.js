// {{package}}: counts the rows of each epoch and logs the count when the
// epoch commits.

import { exportSink, log, Sink } from 'fv-plugin';

/**
 * The handle of a prepared epoch (the logic, testable on its own).
 * @param {number} rows
 */
export function handle(rows) {
  return String(rows);
}

export class RowCounter extends Sink {
  // No config keys (config.schema.json says the same).
  static configTypes = {};

  constructor(config, inputSchema, task) {
    super(config, inputSchema, task);
    this.openRows = 0;
  }

  // A row counter reads no column: the host sends row counts only.
  inputColumns() {
    return [];
  }

  write(batch) {
    this.openRows += batch.numRows;
  }

  // Epochs are BigInts. The handle is stored by the host and given back to
  // `commit`, which must be idempotent: it is replayed after a crash.
  prepare(epoch) {
    const rows = this.openRows;
    this.openRows = 0;
    return handle(rows);
  }

  commit(epoch, handle) {
    log.info(`epoch ${epoch}: ${new TextDecoder().decode(handle)} rows`);
  }

  abort(epoch) {
    this.openRows = 0;
  }
}

exportSink(RowCounter);
