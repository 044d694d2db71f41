// Component glue for the `fv:plugin/step` export: the WIT resource `step`
// (the class componentize-js binds as `step.Step`) wraps the class given to
// `exportStep`. Bundled only into components (it imports the host's `log`).

import { log } from 'fv:plugin/log@0.4.1';

import * as adapt from '../adapt.js';
import { readBatch } from '../ipc.js';
import { setLogSink } from '../log.js';
import { BadRows, ProcessError, describeError, raisingRows } from '../plugin.js';

setLogSink(log);

class Step {
  constructor(inner) {
    this.inner = inner;
  }

  static open(config, inputSchema, task) {
    return adapt.open(Step, 'step', config, inputSchema, task);
  }

  inputColumns() {
    return adapt.inputColumnsOf(this.inner);
  }

  outputSchema() {
    return adapt.schemaOf(this.inner, 'outputSchema');
  }

  process(bytes) {
    let batch;
    try {
      batch = readBatch(bytes);
    } catch (e) {
      return { tag: 'err', val: { tag: 'failed', val: `decoding the input batch: ${e.message}` } };
    }
    let out;
    try {
      out = this.inner.process(batch);
    } catch (e) {
      return this.failure(e, batch);
    }
    // An async `process` (one that awaits fetch(), say): componentize-js
    // runs the event loop until the promise settles, within the call.
    if (out && typeof out.then === 'function') {
      return out.then(
        (answer) => this.answer(answer, batch),
        (e) => failed(e),
      );
    }
    return this.answer(out, batch);
  }

  answer(out, batch) {
    try {
      const [kind, val] = adapt.stepOutput(out, batch.numRows);
      return { tag: 'ok', val: { tag: kind, val } };
    } catch (e) {
      return failed(e);
    }
  }

  failure(e, batch) {
    if (e instanceof BadRows) {
      const rows = e.rows.map((r) => ({ row: r.row, message: String(r.message) }));
      return { tag: 'err', val: { tag: 'bad-rows', val: rows } };
    }
    if (!(e instanceof ProcessError)) {
      // Poison rows, isolated as the host isolates a Rust step's trap.
      const bad = raisingRows((part) => this.inner.process(part), batch, e);
      if (bad.length && !(bad.length === batch.numRows && batch.numRows > 1)) {
        const rows = bad.map((r) => ({ row: r.row, message: String(r.message) }));
        return { tag: 'err', val: { tag: 'bad-rows', val: rows } };
      }
    }
    return failed(e);
  }
}

/** A whole-batch failure (a rejected async `process` is one too: its rows
 * are not bisected, since each retry would repeat its requests). */
function failed(e) {
  if (e instanceof BadRows) {
    const rows = e.rows.map((r) => ({ row: r.row, message: String(r.message) }));
    return { tag: 'err', val: { tag: 'bad-rows', val: rows } };
  }
  return { tag: 'err', val: { tag: 'failed', val: describeError(e) } };
}

export const step = { Step };
