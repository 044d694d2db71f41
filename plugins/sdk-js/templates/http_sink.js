// {{package}}: counts the rows of each epoch and, when the epoch commits,
// POSTs `{"task":…,"epoch":…,"rows":…}` to `url` with fetch() (through the
// host's wasi:http under the node's `allow_http`).
//
// Exactly-once for a receiver that deduplicates: the body is fixed by
// `prepare` (the handle the host keeps in the checkpoint) and sent only by
// `commit`, with the header `Idempotency-Key: <topology>/<sink>/<task>/<epoch>`;
// a commit replayed after a crash sends the same body under the same key.
// (Epochs start at 1 again when a topology starts without a checkpoint:
// fvhost's own `http-sink` adds a history to its keys for that.)

import { ConfigError, exportSink, Sink } from 'fv-plugin';

/**
 * The body POSTed for an epoch (the logic, testable on its own).
 * @param {number} task
 * @param {bigint} epoch
 * @param {number} rows
 */
export function body(task, epoch, rows) {
  return `{"task":${task},"epoch":${epoch},"rows":${rows}}`;
}

/**
 * Whether a receiver's answer commits the epoch: 2xx, or 409 (it already
 * has this key: a replayed commit).
 * @param {number} status
 */
export function committed(status) {
  return (status >= 200 && status < 300) || status === 409;
}

export class EpochPoster extends Sink {
  // `url`: the endpoint (config.schema.json says the same).
  static configTypes = { url: 'string' };

  constructor(config, inputSchema, task) {
    super(config, inputSchema, task);
    if (!/^https?:\/\//.test(config.url)) throw new ConfigError('must be an http:// or https:// URL', 'url');
    this.openRows = 0;
  }

  // It counts rows: no column needs to cross.
  inputColumns() {
    return [];
  }

  write(batch) {
    this.openRows += batch.numRows;
  }

  // Epochs are BigInts. The handle is stored by the host and given back to
  // `commit`, which is replayed after a crash.
  prepare(epoch) {
    const rows = this.openRows;
    this.openRows = 0;
    return body(this.task.taskIndex, epoch, rows);
  }

  // Async: the call waits for fetch() within its `call_timeout`.
  async commit(epoch, handle) {
    const { topology, stage, taskIndex } = this.task;
    const response = await fetch(this.config.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': `${topology}/${stage}/${taskIndex}/${epoch}` },
      body: typeof handle === 'string' ? handle : new TextDecoder().decode(handle),
    });
    // The host retries a failed commit; the key keeps it once.
    if (!committed(response.status)) throw new Error(`POST ${this.config.url} answered ${response.status}: ${await response.text()}`);
  }

  abort(epoch) {
    this.openRows = 0;
  }
}

exportSink(EpochPoster);
