// The answers a plugin gives and how the SDK turns them into what crosses
// the boundary: Keep, Columns, a batch; BadRows; RowStep's dead letters;
// errors at open as config errors; describeError's `at file:line`.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  BadRows,
  Columns,
  ConfigError,
  describeError,
  Field,
  Float64,
  fromColumns,
  Int64,
  Keep,
  ProcessError,
  readBatch,
  RowError,
  RowStep,
  Schema,
  Step,
  TaskContext,
} from 'fv-plugin';
import { runStep } from 'fv-plugin/testing';

import * as adapt from '../src/adapt.js';
import { exported } from '../src/plugin.js';

const TASK = new TaskContext('t', 's', 0, 1);
const INPUT = fromColumns(new Schema([new Field('n', new Int64(), false)]), { n: [1, 2, 3] });

test('Keep becomes bits, and must have one value per row', () => {
  assert.deepEqual(adapt.stepOutput(new Keep([true, null, true]), 3), ['keep', new Uint8Array([0b101])]);
  assert.throws(() => adapt.stepOutput(new Keep([true]), 3), /Keep has 1 values for a batch of 3 rows/);
});

test('Columns and batches become IPC streams; anything else is named', () => {
  const cols = fromColumns(new Schema([new Field('x', new Float64(), true)]), { x: [1, 2, 3] });
  const [kind, bytes] = adapt.stepOutput(new Columns(cols), 3);
  assert.equal(kind, 'columns');
  assert.equal(readBatch(bytes).numRows, 3);
  assert.throws(() => adapt.stepOutput(new Columns(cols), 4), /Columns has 3 rows for a batch of 4 rows/);
  assert.equal(adapt.stepOutput(INPUT, 99)[0], 'batch');
  assert.throws(() => adapt.stepOutput([true], 1), /process returned a Array; return Keep, Columns or a RecordBatch/);
});

test('a failure at open is a config error; a ConfigError keeps its key', () => {
  class Throws extends Step {
    constructor(c, s, t) {
      super(c, s, t);
      throw new TypeError('boom');
    }
  }
  assert.throws(() => adapt.openInstance('step', '{}', INPUT.schema, TASK, Throws), (e) =>
    e instanceof ConfigError && /^Throws failed to open: TypeError: boom \(at plugin\.test\.mjs:\d+/.test(e.message));
  class Refuses extends Step {
    constructor(c, s, t) {
      super(c, s, t);
      throw new ConfigError('no such column', 'column');
    }
  }
  assert.throws(() => adapt.openInstance('step', '{}', INPUT.schema, TASK, Refuses), { key: 'column', reason: 'no such column' });
  assert.deepEqual(adapt.configErrorOf(new ConfigError('x', 'k')), { key: 'k', message: 'x' });
  assert.throws(() => adapt.openInstance('step', '{}', new Uint8Array([1]), TASK, Step), /input schema the JS SDK cannot read/);
});

test('a component that exported nothing says how to export', () => {
  assert.throws(() => exported('sink'), /the component exports no sink class: call exportSink\(YourClass\)/);
});

test('describeError names the error, its message and where it was thrown', () => {
  let err;
  try {
    null.x;
  } catch (e) {
    err = e;
  }
  assert.match(describeError(err), /^TypeError: Cannot read properties of null \(reading 'x'\) \(at plugin\.test\.mjs:\d+/);
  assert.equal(describeError('str'), 'thrown: str');
});

test('a step answering Keep: the host keeps the rows', () => {
  class Odd extends Step {
    inputColumns() {
      return ['n'];
    }
    process(batch) {
      return new Keep(batch.getChild('n').toArray().map((n) => n % 2n === 1n));
    }
  }
  assert.deepEqual(runStep(Odd, {}, INPUT).rows, [{ n: 1n }, { n: 3n }]);
});

test('BadRows: those rows are dead-lettered, the rest processed again', () => {
  class NoTwos extends Step {
    process(batch) {
      const bad = [...batch.getChild('n')].flatMap((n, i) => (n === 2n ? [new RowError(i, 'two')] : []));
      if (bad.length) throw new BadRows(bad);
      return batch;
    }
  }
  const { rows, deadLetters } = runStep(NoTwos, {}, INPUT);
  assert.deepEqual(rows, [{ n: 1n }, { n: 3n }]);
  assert.deepEqual(deadLetters, [{ row: { n: 2n }, message: 'two' }]);
  assert.match(new BadRows([new RowError(1, 'two')]).message, /1 bad row\(s\): row 1: two/);
});

test('a throw in a batch Step isolates the rows it throws on, as a trap would', () => {
  class TwoIsPoison extends Step {
    process(batch) {
      for (const n of batch.getChild('n')) if (n === 2n) throw new RangeError(`${n} is poison`);
      return batch;
    }
  }
  const { rows, deadLetters } = runStep(TwoIsPoison, {}, INPUT);
  assert.deepEqual(rows, [{ n: 1n }, { n: 3n }]);
  assert.equal(deadLetters.length, 1);
  assert.deepEqual(deadLetters[0].row, { n: 2n });
  assert.match(deadLetters[0].message, /^RangeError: 2 is poison \(at plugin\.test\.mjs:\d+/);
  class Broken extends Step {
    process() {
      throw new TypeError('always');
    }
  }
  assert.throws(() => runStep(Broken, {}, INPUT), /process failed: TypeError: always/);
  class Refuses extends Step {
    process(batch) {
      if ([...batch.getChild('n')].includes(2n)) throw new ProcessError('refused');
      return batch;
    }
  }
  assert.throws(() => runStep(Refuses, {}, INPUT), /refused/);
});

test('RowStep: rows as objects, null drops a row, a throw dead-letters it', () => {
  class Half extends RowStep {
    outputSchema() {
      return new Schema([new Field('n', new Int64(), false), new Field('half', new Float64(), true)]);
    }
    processRow(row) {
      if (row.n === 3n) return null;
      if (row.n === 2n) throw new RangeError('no even numbers');
      return { n: row.n, half: Number(row.n) / 2 };
    }
  }
  const { rows, deadLetters } = runStep(Half, {}, INPUT);
  assert.deepEqual(rows, [{ n: 1n, half: 0.5 }]);
  assert.equal(deadLetters.length, 1);
  assert.match(deadLetters[0].message, /^RangeError: no even numbers \(at plugin\.test\.mjs:\d+ in processRow\)$/);
});

test('a failing process fails the batch with the reason', () => {
  class Fails extends Step {
    process() {
      throw new Error('down');
    }
  }
  assert.throws(() => runStep(Fails, {}, INPUT), /process failed: Error: down \(at plugin\.test\.mjs:\d+/);
});
