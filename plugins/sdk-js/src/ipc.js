// The boundary's bytes: Arrow IPC *stream* format (a schema message, zero or
// one record batch, the end marker), one call per batch, read and written
// with apache-arrow. A schema crosses as a stream with no batch.

import { RecordBatch, RecordBatchReader, RecordBatchStreamWriter, Schema, Table, tableToIPC } from 'apache-arrow';

import { fromColumns } from './batch.js';

/** The bytes could not be read as an Arrow IPC stream, or a value not written as one. */
export class IpcError extends Error {
  constructor(message) {
    super(message);
    this.name = 'IpcError';
  }
}

/** The stream's schema and its first batch (undefined when it has none). */
function readStream(bytes) {
  let reader;
  try {
    reader = RecordBatchReader.from(bytes);
    reader.open();
  } catch (e) {
    throw new IpcError(`not an Arrow IPC stream apache-arrow can read: ${e.message}`);
  }
  if (!reader.schema) throw new IpcError('not an Arrow IPC stream: no schema message');
  let first;
  try {
    const next = reader.next();
    first = next.done ? undefined : next.value;
  } catch (e) {
    throw new IpcError(`not an Arrow IPC stream apache-arrow can read: ${e.message}`);
  }
  return { schema: reader.schema, batch: first };
}

/**
 * The schema of an IPC stream.
 * @param {Uint8Array} bytes
 * @returns {Schema}
 */
export function readSchema(bytes) {
  return readStream(bytes).schema;
}

/**
 * The first record batch of an IPC stream (the host sends one), or an
 * empty batch of its schema when the stream holds none.
 * @param {Uint8Array} bytes
 * @returns {RecordBatch}
 */
export function readBatch(bytes) {
  const { schema, batch } = readStream(bytes);
  return batch ?? emptyBatch(schema);
}

/**
 * `table` as one RecordBatch: the host reads exactly one batch per stream.
 * @param {Table} table
 * @returns {RecordBatch}
 */
export function singleBatch(table) {
  if (table.batches.length === 1) return table.batches[0];
  if (table.batches.length === 0) return emptyBatch(table.schema);
  // apache-arrow has no concatenation into one batch: rebuild the columns.
  const columns = {};
  for (const [c, f] of table.schema.fields.entries()) columns[f.name] = Array.from(table.getChildAt(c));
  return fromColumns(table.schema, columns);
}

/** A batch of `schema` with no rows. */
export function emptyBatch(schema) {
  return new RecordBatch(schema, undefined);
}

/**
 * A batch (or a Table, combined into one batch) as IPC stream bytes.
 * @param {RecordBatch | Table} batch
 * @returns {Uint8Array}
 */
export function writeBatch(batch) {
  const table = batch instanceof Table ? batch : batch instanceof RecordBatch ? new Table(batch) : null;
  if (!table) throw new IpcError(`expected an apache-arrow RecordBatch or Table, not ${describe(batch)}`);
  const one = table.batches.length === 1 ? table : new Table(singleBatch(table));
  return tableToIPC(one, 'stream');
}

/**
 * A schema as IPC stream bytes (no batch).
 * @param {Schema} schema
 * @returns {Uint8Array}
 */
export function writeSchema(schema) {
  if (!(schema instanceof Schema)) throw new IpcError(`expected an apache-arrow Schema, not ${describe(schema)}`);
  const writer = new RecordBatchStreamWriter();
  writer.reset(undefined, schema);
  writer.finish();
  return writer.toUint8Array(true);
}

/**
 * A keep mask as Arrow-order bits (LSB first), null and undefined as false.
 * @param {ArrayLike<boolean | null | undefined>} mask
 * @returns {Uint8Array}
 */
export function maskBits(mask) {
  const bits = new Uint8Array((mask.length + 7) >> 3);
  for (let i = 0; i < mask.length; i++) {
    if (mask[i]) bits[i >> 3] |= 1 << (i & 7);
  }
  return bits;
}

/** `a Foo`, `null`, `a number (3)`: what a wrong value was, for errors. */
export function describe(value) {
  if (value === null || value === undefined) return String(value);
  if (typeof value !== 'object') return `a ${typeof value} (${String(value).slice(0, 40)})`;
  return `a ${value.constructor?.name ?? 'object'}`;
}
