// Test plugin (e2e): a sink that reads no column (`inputColumns()` is `[]`,
// so the host sends row counts only), counts the rows of each epoch, hands
// the count over as the prepared handle, and logs `epoch N: M rows` when
// the epoch commits — what a test checks in the host's log.

import { exportSink, log, Sink } from 'fv-plugin';

class RowCounter extends Sink {
  static configTypes = {};

  constructor(config, inputSchema, task) {
    super(config, inputSchema, task);
    this.open = 0;
  }

  inputColumns() {
    return [];
  }

  write(batch) {
    this.open += batch.numRows;
  }

  prepare(epoch) {
    const rows = this.open;
    this.open = 0;
    return String(rows);
  }

  commit(epoch, handle) {
    log.info(`epoch ${epoch}: ${new TextDecoder().decode(handle)} rows`);
  }

  abort(epoch) {
    this.open = 0;
  }
}

exportSink(RowCounter);

export default RowCounter;
