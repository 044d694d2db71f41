// Component glue for the `fv:plugin/sink` export: the WIT resource `sink`
// wraps the class given to `exportSink`. Bundled only into components.

import { log } from 'fv:plugin/log@0.4.1';

import * as adapt from '../adapt.js';
import { readBatch } from '../ipc.js';
import { error as logError, setLogSink } from '../log.js';
import { describeError, TaskContext } from '../plugin.js';

setLogSink(log);

/** `result<T, string>`: the value of `f()`, or the error described. */
function call(f) {
  try {
    return { tag: 'ok', val: f() };
  } catch (e) {
    return { tag: 'err', val: describeError(e) };
  }
}

class Sink {
  constructor(inner) {
    this.inner = inner;
  }

  static open(config, inputSchema, task) {
    const ctx = new TaskContext(task.topology, task.stage, task.taskIndex, task.parallelism);
    try {
      return new Sink(adapt.openInstance('sink', config, inputSchema, ctx));
    } catch (e) {
      return { tag: 'err', val: adapt.configErrorOf(e) };
    }
  }

  inputColumns() {
    try {
      return adapt.columns(this.inner.inputColumns());
    } catch (e) {
      logError(`inputColumns failed, reading every column: ${describeError(e)}`);
      return undefined;
    }
  }

  write(bytes) {
    return call(() => {
      this.inner.write(readBatch(bytes));
    });
  }

  prepare(epoch) {
    return call(() => adapt.bytesOf(this.inner.prepare(epoch), 'prepare'));
  }

  commit(epoch, handle) {
    return call(() => {
      this.inner.commit(epoch, handle);
    });
  }

  abort(epoch) {
    return call(() => {
      this.inner.abort(epoch);
    });
  }
}

export const sink = { Sink };
