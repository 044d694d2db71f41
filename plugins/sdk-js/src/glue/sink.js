// Component glue for the `fv:plugin/sink` export: the WIT resource `sink`
// wraps the class given to `exportSink`. Bundled only into components.

import { log } from 'fv:plugin/log@0.4.1';

import * as adapt from '../adapt.js';
import { readBatch } from '../ipc.js';
import { setLogSink } from '../log.js';

setLogSink(log);

class Sink {
  constructor(inner) {
    this.inner = inner;
  }

  static open(config, inputSchema, task) {
    return adapt.open(Sink, 'sink', config, inputSchema, task);
  }

  inputColumns() {
    return adapt.inputColumnsOf(this.inner);
  }

  // Each method may be async (await fetch() in it): `adapt.result`
  // settles the promise within the call.
  write(bytes) {
    return adapt.result(() => this.inner.write(readBatch(bytes)), () => undefined);
  }

  prepare(epoch) {
    return adapt.result(() => this.inner.prepare(epoch), (v) => adapt.bytesOf(v, 'prepare'));
  }

  commit(epoch, handle) {
    return adapt.result(() => this.inner.commit(epoch, handle), () => undefined);
  }

  abort(epoch) {
    return adapt.result(() => this.inner.abort(epoch), () => undefined);
  }
}

export const sink = { Sink };
