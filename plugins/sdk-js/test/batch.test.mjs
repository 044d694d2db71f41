// Building and reshaping batches: from rows and columns against a schema,
// take, withColumn, rows; BigInt for 64-bit integers; errors naming the column.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import {
  appendFields,
  ArrowTypeError,
  Bool,
  column,
  Field,
  fieldOf,
  Float64,
  fromColumns,
  fromRows,
  Int32,
  Int64,
  isInteger,
  readBatch,
  rows,
  Schema,
  take,
  TimestampMillisecond,
  Utf8,
  withColumn,
} from 'fv-plugin';

const SCHEMA = new Schema([
  new Field('n', new Int64(), false),
  new Field('x', new Float64(), true),
  new Field('s', new Utf8(), true),
  new Field('b', new Bool(), true),
  new Field('at', new TimestampMillisecond(), true),
]);

test('fromRows: a missing key is null, numbers become BigInt in 64-bit columns', () => {
  const batch = fromRows(SCHEMA, [{ n: 1, x: 0.5, s: 'a', b: true, at: 1_700_000_000_000 }, { n: 2n }]);
  assert.deepEqual(batch.schema.fields, SCHEMA.fields);
  assert.deepEqual(rows(batch), [
    { n: 1n, x: 0.5, s: 'a', b: true, at: 1_700_000_000_000 },
    { n: 2n, x: null, s: null, b: null, at: null },
  ]);
});

test('a null in a non-nullable column, a fraction in an integer column, a wrong kind: named', () => {
  assert.throws(() => fromRows(SCHEMA, [{ n: 1 }, { x: 1 }]), new ArrowTypeError('column `n` is not nullable but row 1 is null'));
  assert.throws(() => fromRows(SCHEMA, [{ n: 1.5 }]), /column `n` \(Int64\): row 0 is a number \(1.5\), not an integer/);
  assert.throws(() => fromRows(SCHEMA, [{ n: 1, s: 7 }]), /column `s` \(Utf8\): row 0 is a number \(7\), not a string/);
});

test('fromColumns and column', () => {
  const batch = fromColumns(SCHEMA, { n: [3, 4], x: [1, null], s: ['é', ''], b: [false, null], at: [0, 1] });
  assert.deepEqual(column(batch, 'n'), [3n, 4n]);
  assert.deepEqual(column(batch, 's'), ['é', '']);
  assert.deepEqual(column(batch, 'b'), [false, null]);
  assert.throws(() => column(batch, 'nope'), /the batch has no column `nope` \(columns: n, x, s, b, at\)/);
  assert.throws(() => fromColumns(SCHEMA, { n: [1] }), /no values for column `x`/);
});

test('take picks rows in order, nulls and all', () => {
  const batch = fromColumns(SCHEMA, { n: [0, 1, 2, 3], x: [0, null, 2, 3], s: ['a', 'bb', null, 'dddd'], b: [true, false, null, true], at: [10, 11, 12, null] });
  const taken = take(batch, [3, 1, 2]);
  assert.deepEqual(taken.schema.fields, SCHEMA.fields);
  assert.deepEqual(rows(taken), [
    { n: 3n, x: 3, s: 'dddd', b: true, at: null },
    { n: 1n, x: null, s: 'bb', b: false, at: 11 },
    { n: 2n, x: 2, s: null, b: null, at: 12 },
  ]);
  assert.equal(take(batch, []).numRows, 0);
});

test('take keeps every type of the pyarrow fixtures', () => {
  for (const name of ['all_types', 'decimal', 'dictionary', 'list']) {
    const batch = readBatch(readFileSync(new URL(`../../sdk-python/tests/fixtures/${name}.arrows`, import.meta.url)));
    const order = [...Array(batch.numRows).keys()].reverse();
    const taken = take(batch, order);
    for (const f of batch.schema.fields) {
      const want = order.map((i) => batch.getChild(f.name).get(i));
      const got = [...taken.getChild(f.name)];
      assert.equal(String(got), String(want), `${name}.${f.name}`);
    }
  }
});

test('withColumn appends or replaces, appendFields and fieldOf', () => {
  const batch = fromColumns(new Schema([new Field('a', new Int32(), false)]), { a: [1, 2] });
  const more = withColumn(batch, new Field('b', new Float64(), true), [0.5, null]);
  assert.deepEqual(more.schema.fields.map((f) => f.name), ['a', 'b']);
  assert.deepEqual(rows(more), [{ a: 1, b: 0.5 }, { a: 2, b: null }]);
  const replaced = withColumn(more, new Field('a', new Utf8(), true), ['x', 'y']);
  assert.deepEqual(rows(replaced), [{ a: 'x', b: 0.5 }, { a: 'y', b: null }]);
  assert.throws(() => withColumn(batch, new Field('c', new Int32()), [1]), /column `c` has 1 values for 2 rows/);
  const schema = appendFields(batch.schema, new Field('z', new Utf8()));
  assert.deepEqual(schema.fields.map((f) => f.name), ['a', 'z']);
  assert.ok(isInteger(fieldOf(schema, 'a').type));
  assert.equal(fieldOf(schema, 'q'), undefined);
});
