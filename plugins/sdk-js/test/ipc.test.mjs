// The boundary bytes: Arrow IPC streams written by pyarrow (the Python
// SDK's fixtures) read here, and what this SDK writes read back: one batch
// per stream, a schema as a stream without batches, keep masks as bits.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import {
  column,
  Field,
  Int64,
  maskBits,
  readBatch,
  readSchema,
  Schema,
  Table,
  tableFromArrays,
  tableFromIPC,
  Utf8,
  writeBatch,
  writeSchema,
} from 'fv-plugin';

const fixture = (name) => readFileSync(new URL(`../../sdk-python/tests/fixtures/${name}`, import.meta.url));
const json = (v) => JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? `${x}n` : x instanceof Uint8Array ? [...x] : x));

test('pyarrow streams of every type the Python SDK reads are read', () => {
  const expected = JSON.parse(fixture('all_types.json'));
  const batch = readBatch(fixture('all_types.arrows'));
  assert.equal(batch.numRows, expected.rows);
  assert.deepEqual(batch.schema.fields.map((f) => f.name), expected.fields.map((f) => f[0]));
  assert.deepEqual(batch.schema.fields.map((f) => f.nullable), expected.fields.map((f) => f[2]));
  // Integers as written (64-bit ones as BigInt), text as is.
  assert.deepEqual(column(batch, 'i8'), expected.columns.i8);
  // (JSON cannot hold every 64-bit value: the first is -2^62, exactly.)
  assert.equal(column(batch, 'i64')[0], -(2n ** 62n));
  assert.deepEqual(column(batch, 's'), expected.columns.s);
});

test('what the SDK writes reads back the same, every type', () => {
  const batch = readBatch(fixture('all_types.arrows'));
  const back = readBatch(writeBatch(batch));
  assert.equal(back.numRows, batch.numRows);
  for (const f of batch.schema.fields) {
    assert.equal(String(back.schema.fields.find((g) => g.name === f.name).type), String(f.type), f.name);
    assert.equal(json(column(back, f.name)), json(column(batch, f.name)), f.name);
  }
});

test('a schema crosses as a stream with no batch', () => {
  const schema = new Schema([new Field('n', new Int64(), false), new Field('s', new Utf8(), true)]);
  const bytes = writeSchema(schema);
  // One message (continuation marker, metadata length, metadata), then the
  // end-of-stream marker: no batch message.
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  assert.equal(view.getUint32(0, true), 0xffffffff);
  const end = 8 + view.getInt32(4, true);
  assert.deepEqual([...bytes.subarray(end)], [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
  assert.deepEqual(readSchema(bytes).fields.map((f) => `${f.name}:${f.type}:${f.nullable}`), ['n:Int64:false', 's:Utf8:true']);
  assert.equal(readBatch(bytes).numRows, 0);
});

test('a table of several batches is written as one batch', () => {
  const a = tableFromArrays({ n: BigInt64Array.from([1n, 2n]) });
  const b = tableFromArrays({ n: BigInt64Array.from([3n]) });
  const two = new Table([...a.batches, ...b.batches]);
  assert.equal(two.batches.length, 2);
  const bytes = writeBatch(two);
  assert.equal(tableFromIPC(bytes).batches.length, 1);
  assert.deepEqual(column(readBatch(bytes), 'n'), [1n, 2n, 3n]);
});

test('a batch of no columns keeps its row count (a sink reading no column)', () => {
  const batch = tableFromArrays({ n: Int32Array.from([1, 2, 3]) }).batches[0].select([]);
  assert.equal(readBatch(writeBatch(batch)).numRows, 3);
});

test('keep masks are Arrow-order bits, null as false', () => {
  assert.deepEqual([...maskBits([true, false, null, true, true, true, true, true, true])], [0b11111001, 0b1]);
  assert.deepEqual([...maskBits([])], []);
});

test('what cannot be written is named', () => {
  assert.throws(() => writeBatch([1, 2]), /expected an apache-arrow RecordBatch or Table, not a Array/);
  assert.throws(() => writeSchema({}), /expected an apache-arrow Schema/);
  assert.throws(() => readBatch(new Uint8Array([1, 2, 3])), /not an Arrow IPC stream: no schema message/);
  assert.equal(readBatch(writeSchema(new Schema([]))).numRows, 0);
});

test('compressed streams are refused with the reason', () => {
  assert.throws(() => readBatch(fixture('zstd.arrows')), /not an Arrow IPC stream apache-arrow can read: .*codec/);
});
