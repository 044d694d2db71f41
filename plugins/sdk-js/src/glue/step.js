// Component glue for the `fv:plugin/step` export: the WIT resource `step`
// (the class componentize-js binds as `step.Step`) wraps the class given to
// `exportStep`. Bundled only into components (it imports the host's `log`).

import { log } from 'fv:plugin/log@0.4.1';

import * as adapt from '../adapt.js';
import { readBatch } from '../ipc.js';
import { error as logError, setLogSink } from '../log.js';
import { BadRows, describeError, TaskContext } from '../plugin.js';

setLogSink(log);

class Step {
  constructor(inner) {
    this.inner = inner;
  }

  static open(config, inputSchema, task) {
    const ctx = new TaskContext(task.topology, task.stage, task.taskIndex, task.parallelism);
    try {
      return new Step(adapt.openInstance('step', config, inputSchema, ctx));
    } catch (e) {
      return { tag: 'err', val: adapt.configErrorOf(e) };
    }
  }

  inputColumns() {
    try {
      return adapt.columns(this.inner.inputColumns());
    } catch (e) {
      // A trap would say less: read every column, and say why.
      logError(`inputColumns failed, reading every column: ${describeError(e)}`);
      return undefined;
    }
  }

  outputSchema() {
    try {
      return adapt.schemaBytes(this.inner.outputSchema(), 'outputSchema');
    } catch (e) {
      // The host refuses an empty schema, naming the stage; the log says why.
      logError(`outputSchema failed: ${describeError(e)}`);
      return new Uint8Array(0);
    }
  }

  process(bytes) {
    let batch;
    try {
      batch = readBatch(bytes);
    } catch (e) {
      return { tag: 'err', val: { tag: 'failed', val: `decoding the input batch: ${e.message}` } };
    }
    try {
      const [kind, out] = adapt.stepOutput(this.inner.process(batch), batch.numRows);
      return { tag: 'ok', val: { tag: kind, val: out } };
    } catch (e) {
      if (e instanceof BadRows) {
        const rows = e.rows.map((r) => ({ row: r.row, message: String(r.message) }));
        return { tag: 'err', val: { tag: 'bad-rows', val: rows } };
      }
      return { tag: 'err', val: { tag: 'failed', val: describeError(e) } };
    }
  }
}

export const step = { Step };
