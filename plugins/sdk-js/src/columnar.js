// Column work done on apache-arrow's buffers directly: reading a column's
// values, taking rows, building a column from plain values. Inside a
// component JavaScript runs in an interpreter (StarlingMonkey, no JIT),
// where apache-arrow's generic per-value paths (iterators, visitors,
// builders) cost tens of microseconds a value; these loops over typed
// arrays are 10–50× faster. Each function returns undefined for a type it
// does not handle, and the caller falls back to apache-arrow's generic code.
//
// Buffer conventions of apache-arrow's Data: `values` and `valueOffsets`
// are already sliced to the Data (index them from 0), while the validity
// bitmap and boolean values are not (index them from `offset`).

import { makeData, Precision, Type } from 'apache-arrow';

const isValidBit = (bitmap, pos) => (bitmap[pos >> 3] & (1 << (pos & 7))) !== 0;

/** Whether `d` has a null (and so a bitmap worth reading). */
const hasNulls = (d) => d.nullCount > 0 && d.nullBitmap && d.nullBitmap.length > 0;

/** A type whose values `values[i]` holds as is (numbers, or BigInts for 64-bit). */
function isPlainNumeric(type) {
  return type.typeId === Type.Int || (type.typeId === Type.Float && type.precision !== Precision.HALF);
}

const isUtf8 = (type) => type.typeId === Type.Utf8 || type.typeId === Type.LargeUtf8;
const isBinary = (type) => type.typeId === Type.Binary || type.typeId === Type.LargeBinary;

/**
 * The values of one Data chunk as a plain array (null for nulls), or
 * undefined for a type without a fast path.
 * @param {import('apache-arrow').Data} d
 */
export function dataValues(d) {
  const n = d.length;
  const out = new Array(n);
  const type = d.type;
  if (isPlainNumeric(type)) {
    const values = d.values;
    for (let i = 0; i < n; i++) out[i] = values[i];
  } else if (type.typeId === Type.Bool) {
    const values = d.values;
    for (let i = 0; i < n; i++) out[i] = isValidBit(values, d.offset + i);
  } else if (isUtf8(type) || isBinary(type)) {
    const offsets = d.valueOffsets;
    const bytes = d.values;
    const big = typeof offsets[0] === 'bigint';
    const decoder = isUtf8(type) ? new TextDecoder() : null;
    for (let i = 0; i < n; i++) {
      const start = big ? Number(offsets[i]) : offsets[i];
      const end = big ? Number(offsets[i + 1]) : offsets[i + 1];
      const slice = bytes.subarray(start, end);
      out[i] = decoder ? decoder.decode(slice) : slice.slice();
    }
  } else {
    return undefined;
  }
  if (hasNulls(d)) {
    const bitmap = d.nullBitmap;
    for (let i = 0; i < n; i++) if (!isValidBit(bitmap, d.offset + i)) out[i] = null;
  }
  return out;
}

/**
 * The rows `indices` of one Data chunk as a new Data, or undefined for a
 * type without a fast path.
 * @param {import('apache-arrow').Data} d
 * @param {ArrayLike<number>} indices
 */
export function takeData(d, indices) {
  const n = indices.length;
  const type = d.type;
  let nullBitmap;
  let nullCount = 0;
  if (hasNulls(d)) {
    nullBitmap = new Uint8Array((n + 7) >> 3);
    const bitmap = d.nullBitmap;
    for (let i = 0; i < n; i++) {
      if (isValidBit(bitmap, d.offset + indices[i])) nullBitmap[i >> 3] |= 1 << (i & 7);
      else nullCount++;
    }
  }
  switch (type.typeId) {
    case Type.Null:
      return makeData({ type, length: n, nullCount: n });
    case Type.Bool: {
      const values = new Uint8Array((n + 7) >> 3);
      for (let i = 0; i < n; i++) {
        if (isValidBit(d.values, d.offset + indices[i])) values[i >> 3] |= 1 << (i & 7);
      }
      return makeData({ type, length: n, nullCount, nullBitmap, data: values });
    }
    case Type.Int:
    case Type.Float:
    case Type.Date:
    case Type.Timestamp:
    case Type.Time:
    case Type.Duration:
    case Type.Interval:
    case Type.Decimal:
    case Type.FixedSizeBinary:
    case Type.Dictionary: {
      const src = d.values;
      const stride = d.stride;
      const dst = new src.constructor(n * stride);
      if (stride === 1) {
        for (let i = 0; i < n; i++) dst[i] = src[indices[i]];
      } else {
        for (let i = 0; i < n; i++) {
          const from = indices[i] * stride;
          for (let k = 0; k < stride; k++) dst[i * stride + k] = src[from + k];
        }
      }
      return makeData({ type, length: n, nullCount, nullBitmap, data: dst, dictionary: d.dictionary });
    }
    case Type.Utf8:
    case Type.Binary:
    case Type.LargeUtf8:
    case Type.LargeBinary: {
      const offsets = d.valueOffsets;
      const bytes = d.values;
      const big = typeof offsets[0] === 'bigint';
      const newOffsets = new offsets.constructor(n + 1);
      let total = 0;
      for (let i = 0; i < n; i++) {
        const r = indices[i];
        total += big ? Number(offsets[r + 1] - offsets[r]) : offsets[r + 1] - offsets[r];
        newOffsets[i + 1] = big ? BigInt(total) : total;
      }
      const data = new Uint8Array(total);
      let at = 0;
      for (let i = 0; i < n; i++) {
        const r = indices[i];
        const start = big ? Number(offsets[r]) : offsets[r];
        const end = big ? Number(offsets[r + 1]) : offsets[r + 1];
        data.set(bytes.subarray(start, end), at);
        at += end - start;
      }
      return makeData({ type, length: n, nullCount, nullBitmap, valueOffsets: newOffsets, data });
    }
    default:
      return undefined;
  }
}

/**
 * A Data of `type` from plain values (null for null), or undefined for a
 * type without a fast path. Throws a TypeError (message without the
 * column) for a value of the wrong kind.
 * @param {import('apache-arrow').DataType} type
 * @param {ArrayLike<any>} values
 */
export function buildData(type, values) {
  const n = values.length;
  let nullBitmap;
  let nullCount = 0;
  const setNull = (i) => {
    if (!nullBitmap) nullBitmap = new Uint8Array((n + 7) >> 3).fill(0xff);
    nullBitmap[i >> 3] &= ~(1 << (i & 7));
    nullCount++;
  };
  if (isPlainNumeric(type)) {
    const Arr = type.ArrayType;
    const big = Arr === BigInt64Array || Arr === BigUint64Array;
    const data = new Arr(n);
    for (let i = 0; i < n; i++) {
      const v = values[i];
      if (v === null || v === undefined) setNull(i);
      else if (big) {
        if (typeof v === 'bigint') data[i] = v;
        else if (Number.isInteger(v)) data[i] = BigInt(v);
        else throw new TypeError(`row ${i} is ${describe(v)}, not an integer`);
      } else if (typeof v === 'number') data[i] = v;
      else if (typeof v === 'bigint') data[i] = Number(v);
      else throw new TypeError(`row ${i} is ${describe(v)}, not a number`);
    }
    return makeData({ type, length: n, nullCount, nullBitmap, data });
  }
  if (type.typeId === Type.Bool) {
    const data = new Uint8Array((n + 7) >> 3);
    for (let i = 0; i < n; i++) {
      const v = values[i];
      if (v === null || v === undefined) setNull(i);
      else if (typeof v === 'boolean') {
        if (v) data[i >> 3] |= 1 << (i & 7);
      } else throw new TypeError(`row ${i} is ${describe(v)}, not a boolean`);
    }
    return makeData({ type, length: n, nullCount, nullBitmap, data });
  }
  if (type.typeId === Type.Utf8) {
    const encoder = new TextEncoder();
    const offsets = new Int32Array(n + 1);
    let buffer = new Uint8Array(Math.max(64, n * 16));
    let at = 0;
    for (let i = 0; i < n; i++) {
      const v = values[i];
      if (v === null || v === undefined) setNull(i);
      else if (typeof v === 'string') {
        // UTF-8 takes at most 3 bytes per UTF-16 unit.
        if (buffer.length - at < v.length * 3) {
          const grown = new Uint8Array(Math.max(buffer.length * 2, at + v.length * 3));
          grown.set(buffer.subarray(0, at));
          buffer = grown;
        }
        at += encoder.encodeInto(v, buffer.subarray(at)).written;
      } else throw new TypeError(`row ${i} is ${describe(v)}, not a string`);
      offsets[i + 1] = at;
    }
    return makeData({ type, length: n, nullCount, nullBitmap, valueOffsets: offsets, data: buffer.slice(0, at) });
  }
  return undefined;
}

function describe(v) {
  if (typeof v === 'string') return `a string (${JSON.stringify(v.slice(0, 40))})`;
  if (typeof v === 'object') return `a ${v.constructor?.name ?? 'object'}`;
  return `${typeof v === 'bigint' ? 'a bigint' : `a ${typeof v}`} (${String(v)})`;
}
