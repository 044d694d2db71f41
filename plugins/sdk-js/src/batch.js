// Building and reshaping apache-arrow RecordBatches the way plugins need
// to: from rows or columns of plain JS values against a given schema (so
// the batch's fields are exactly the declared ones, which the host
// checks), taking rows, adding a column, and iterating rows as objects.
//
// Values are what apache-arrow's `get` returns and its builders take:
// numbers, strings, booleans, Uint8Array for binary, null; BigInt for
// 64-bit integers (Int64, Uint64, Time64, Duration). A plain integer
// number given for a 64-bit column is converted to BigInt here.

import {
  DataType,
  Field,
  makeData,
  makeVector,
  RecordBatch,
  Schema,
  Struct,
  Table,
  Type,
  vectorFromArray,
} from 'apache-arrow';

import { buildData, dataValues, takeData } from './columnar.js';

/** A value could not be put into a column of the given type. */
export class ArrowTypeError extends TypeError {
  constructor(message) {
    super(message);
    this.name = 'ArrowTypeError';
  }
}

/** Whether apache-arrow holds `type`'s values as BigInt. */
export function isBigIntType(type) {
  switch (type.typeId) {
    case Type.Int:
      return type.bitWidth === 64;
    case Type.Time:
      return type.bitWidth === 64;
    case Type.Duration:
      return true;
    default:
      return false;
  }
}

// undefined as null (apache-arrow's builders take only null as null), and
// integer numbers as BigInt for the columns that hold BigInt.
function normalize(values, field) {
  const bigint = isBigIntType(field.type);
  const out = new Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === undefined) {
      out[i] = null;
    } else if (bigint && typeof v === 'number') {
      if (!Number.isInteger(v)) {
        throw new ArrowTypeError(`column \`${field.name}\` (${field.type}): row ${i} is ${v}, not an integer`);
      }
      out[i] = BigInt(v);
    } else if (v !== null && typeof v === 'object' && typeof v.toArray === 'function' && v.type instanceof DataType) {
      // A nested value (a list's items) as `get` returns it: a Vector.
      out[i] = Array.from(v);
    } else {
      out[i] = v;
    }
  }
  return out;
}

/**
 * One column of `field`'s type from plain values (null or undefined: null).
 * @param {Field} field
 * @param {ArrayLike<any>} values
 */
export function columnOf(field, values) {
  let vector;
  try {
    const data = buildData(field.type, values);
    vector = data ? makeVector(data) : vectorFromArray(normalize(values, field), field.type);
  } catch (e) {
    if (e instanceof ArrowTypeError) throw e;
    throw new ArrowTypeError(`column \`${field.name}\` (${field.type}): ${e.message}`);
  }
  if (!field.nullable && vector.nullCount > 0) {
    let row = 0;
    while (row < values.length && values[row] !== null && values[row] !== undefined) row++;
    throw new ArrowTypeError(`column \`${field.name}\` is not nullable but row ${row} is null`);
  }
  return vector;
}

/** The values of a vector as a plain array (null for nulls). */
function valuesOf(vector) {
  if (vector.data.length === 1) {
    const fast = dataValues(vector.data[0]);
    if (fast) return fast;
  }
  const out = new Array(vector.length);
  for (let i = 0; i < out.length; i++) out[i] = vector.get(i);
  return out;
}

/**
 * A batch of exactly `schema` from vectors (one per field, same length).
 * @param {Schema} schema
 * @param {import('apache-arrow').Vector[]} vectors
 * @param {number} length
 */
function assemble(schema, vectors, length) {
  const children = vectors.map((v, i) => {
    if (v.length !== length) {
      throw new ArrowTypeError(`column \`${schema.fields[i].name}\` has ${v.length} values for ${length} rows`);
    }
    return v.data.length === 1 ? v.data[0] : columnOf(schema.fields[i], valuesOf(v)).data[0];
  });
  const data = makeData({ type: new Struct(schema.fields), length, nullCount: 0, children });
  return new RecordBatch(schema, data);
}

/**
 * A batch of `schema` from rows: objects keyed by field name (a missing key is null).
 * @param {Schema} schema
 * @param {Array<Record<string, any>>} rows
 * @returns {RecordBatch}
 */
export function fromRows(schema, rows) {
  const vectors = schema.fields.map((f) => columnOf(f, rows.map((r) => r[f.name])));
  return assemble(schema, vectors, rows.length);
}

/**
 * A batch of `schema` from columns: `{ name: values }`, every field present.
 * @param {Schema} schema
 * @param {Record<string, ArrayLike<any>>} columns
 * @returns {RecordBatch}
 */
export function fromColumns(schema, columns) {
  const length = schema.fields.length ? (columns[schema.fields[0].name]?.length ?? 0) : 0;
  const vectors = schema.fields.map((f) => {
    if (!(f.name in columns)) throw new ArrowTypeError(`no values for column \`${f.name}\``);
    return columnOf(f, columns[f.name]);
  });
  return assemble(schema, vectors, length);
}

/**
 * The rows of `batch` at `indices`, in that order, with the same schema.
 * @param {RecordBatch} batch
 * @param {ArrayLike<number>} indices
 * @returns {RecordBatch}
 */
export function take(batch, indices) {
  const n = indices.length;
  const vectors = batch.schema.fields.map((f, c) => {
    const column = batch.getChildAt(c);
    const fast = column.data.length === 1 ? takeData(column.data[0], indices) : undefined;
    if (fast) return makeVector(fast);
    const values = new Array(n);
    for (let i = 0; i < n; i++) values[i] = column.get(indices[i]);
    return columnOf(f, values);
  });
  return assemble(batch.schema, vectors, n);
}

/**
 * `batch` with `field`'s column set to `values`: replaced when the batch
 * has a column of that name, appended otherwise.
 * @param {RecordBatch} batch
 * @param {Field} field
 * @param {ArrayLike<any>} values
 * @returns {RecordBatch}
 */
export function withColumn(batch, field, values) {
  const vector = columnOf(field, values);
  const at = batch.schema.fields.findIndex((f) => f.name === field.name);
  const fields = [...batch.schema.fields];
  const vectors = fields.map((_, c) => batch.getChildAt(c));
  if (at >= 0) {
    fields[at] = field;
    vectors[at] = vector;
  } else {
    fields.push(field);
    vectors.push(vector);
  }
  return assemble(new Schema(fields, batch.schema.metadata), vectors, batch.numRows);
}

/**
 * The rows of `batch` as plain objects keyed by column name.
 * @param {RecordBatch | Table} batch
 * @returns {Array<Record<string, any>>}
 */
export function rows(batch) {
  const names = batch.schema.fields.map((f) => f.name);
  const columns = names.map((_, c) => valuesOf(batch.getChildAt(c)));
  const out = new Array(batch.numRows);
  for (let r = 0; r < batch.numRows; r++) {
    const row = {};
    for (let c = 0; c < names.length; c++) row[names[c]] = columns[c][r];
    out[r] = row;
  }
  return out;
}

/**
 * The values of one column as a plain array (BigInt for 64-bit integers).
 * @param {RecordBatch | Table} batch
 * @param {string} name
 * @returns {any[]}
 */
export function column(batch, name) {
  const vector = batch.getChild(name);
  if (!vector) {
    const names = batch.schema.fields.map((f) => f.name).join(', ');
    throw new ArrowTypeError(`the batch has no column \`${name}\` (columns: ${names})`);
  }
  return valuesOf(vector);
}

/**
 * `schema` with `fields` appended (a field of the same name is replaced in place).
 * @param {Schema} schema
 * @param {...Field} fields
 * @returns {Schema}
 */
export function appendFields(schema, ...fields) {
  const out = [...schema.fields];
  for (const f of fields) {
    const at = out.findIndex((g) => g.name === f.name);
    if (at >= 0) out[at] = f;
    else out.push(f);
  }
  return new Schema(out, schema.metadata);
}

/**
 * The field called `name`, or undefined.
 * @param {Schema} schema
 * @param {string} name
 * @returns {Field | undefined}
 */
export function fieldOf(schema, name) {
  return schema.fields.find((f) => f.name === name);
}

/**
 * Whether `type` is an integer type (any width, signed or not).
 * @param {DataType} type
 */
export function isInteger(type) {
  return DataType.isInt(type);
}
