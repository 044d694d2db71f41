// Test plugin (e2e): row_counter.js with an async `prepare` and `commit`
// (the shape of a sink that awaits fetch()): the component's call settles
// each promise, so the counts arrive as from the sync sink.

import { exportSink, log, Sink } from 'fv-plugin';

class AsyncRowCounter extends Sink {
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

  async prepare(epoch) {
    const rows = this.open;
    this.open = 0;
    await new Promise((resolve) => setTimeout(resolve, 1));
    return String(rows);
  }

  async commit(epoch, handle) {
    await Promise.resolve();
    log.info(`epoch ${epoch}: ${new TextDecoder().decode(handle)} rows`);
  }

  abort(epoch) {
    this.open = 0;
  }
}

exportSink(AsyncRowCounter);

export default AsyncRowCounter;
