// What the glue modules share: opening an instance of the exported class
// and turning its answers into boundary values. Free of the WIT imports, so
// that the unit tests (and the testing helper) run it under plain Node.

import { RecordBatch, Schema, Table } from 'apache-arrow';

import { ConfigError, parseConfig } from './config.js';
import { describe, IpcError, maskBits, readSchema, writeBatch, writeSchema } from './ipc.js';
import { error as logError } from './log.js';
import { Columns, describeError, exported, Keep, ProcessError, TaskContext } from './plugin.js';

/**
 * `result<T, string>`: the value of `f()`, or the error described.
 * @param {() => unknown} f
 */
export function result(f, then = (v) => v) {
  try {
    const value = f();
    // An async method (one that awaits fetch(), say): componentize-js runs
    // the event loop until the promise settles, within the call.
    if (value && typeof value.then === 'function') {
      return value.then(
        (v) => result(() => then(v)),
        (e) => ({ tag: 'err', val: describeError(e) }),
      );
    }
    return { tag: 'ok', val: then(value) };
  } catch (e) {
    return { tag: 'err', val: describeError(e) };
  }
}

/**
 * The WIT `open` of a resource: `Glue` around the opened instance of the
 * class exported as `kind`, or the config error.
 * @param {Function} Glue the glue class (its constructor takes the instance)
 * @param {'step' | 'source' | 'sink'} kind
 * @param {string} config
 * @param {Uint8Array | null} inputSchema null for a source
 * @param {{ topology: string, stage: string, taskIndex: number, parallelism: number }} task
 */
export function open(Glue, kind, config, inputSchema, task) {
  const ctx = new TaskContext(task.topology, task.stage, task.taskIndex, task.parallelism);
  try {
    return new Glue(openInstance(kind, config, inputSchema, ctx));
  } catch (e) {
    return { tag: 'err', val: configErrorOf(e) };
  }
}

/**
 * The WIT `input-columns` of an instance. A trap would say less: when it
 * throws, read every column, and log why.
 * @param {{ inputColumns(): unknown }} inner
 */
export function inputColumnsOf(inner) {
  try {
    return columns(inner.inputColumns());
  } catch (e) {
    logError(`inputColumns failed, reading every column: ${describeError(e)}`);
    return undefined;
  }
}

/**
 * The schema an instance's `method` returns, as IPC bytes. When it throws:
 * empty bytes, which the host refuses naming the stage; the log says why.
 * @param {object} inner
 * @param {'schema' | 'outputSchema'} method
 */
export function schemaOf(inner, method) {
  try {
    return schemaBytes(inner[method](), method);
  } catch (e) {
    logError(`${method} failed: ${describeError(e)}`);
    return new Uint8Array(0);
  }
}

/**
 * Parse the config and the input schema and construct the exported class.
 * Throws ConfigError for anything that goes wrong, so that the host reports
 * a config error (and never sees a trap).
 * @param {'step' | 'source' | 'sink'} kind
 * @param {string} config the config as JSON
 * @param {Uint8Array | Schema | null} inputSchema IPC bytes (or a Schema, in tests); null for a source
 * @param {import('./plugin.js').TaskContext} task
 * @param {Function} [cls] the class (default: the one exported as `kind`)
 */
export function openInstance(kind, config, inputSchema, task, cls = exported(kind)) {
  try {
    const parsed = parseConfig(config, cls);
    if (inputSchema === null || inputSchema === undefined) return new cls(parsed, task);
    let schema = inputSchema;
    if (!(schema instanceof Schema)) {
      try {
        schema = readSchema(inputSchema);
      } catch (e) {
        throw new ConfigError(`the host sent an input schema the JS SDK cannot read: ${e.message}`);
      }
    }
    return new cls(parsed, schema, task);
  } catch (e) {
    if (e instanceof ConfigError) throw e;
    throw new ConfigError(`${cls.name} failed to open: ${describeError(e)}`);
  }
}

/**
 * The WIT `config-error` of an error thrown by `openInstance`.
 * @param {unknown} e
 * @returns {{ key: string | undefined, message: string }}
 */
export function configErrorOf(e) {
  if (e instanceof ConfigError) return { key: e.key, message: e.reason };
  return { key: undefined, message: describeError(e) };
}

/**
 * `['keep' | 'columns' | 'batch', bytes]` of what `process` returned for a batch of `rows` rows.
 * @param {unknown} output
 * @param {number} rows
 * @returns {['keep' | 'columns' | 'batch', Uint8Array]}
 */
export function stepOutput(output, rows) {
  if (output instanceof Keep) {
    const mask = output.mask;
    if (!mask || typeof mask.length !== 'number') throw new ProcessError(`Keep takes an array of booleans, not ${describe(mask)}`);
    if (mask.length !== rows) throw new ProcessError(`Keep has ${mask.length} values for a batch of ${rows} rows`);
    return ['keep', maskBits(mask)];
  }
  if (output instanceof Columns) {
    const n = output.batch?.numRows;
    if (n !== rows) throw new ProcessError(`Columns has ${n} rows for a batch of ${rows} rows`);
    return ['columns', writeBatch(output.batch)];
  }
  if (output instanceof RecordBatch || output instanceof Table) return ['batch', writeBatch(output)];
  throw new ProcessError(`process returned ${describe(output)}; return Keep, Columns or a RecordBatch (from 'fv-plugin')`);
}

/**
 * A schema's IPC bytes; ProcessError naming `what` when it is not a Schema.
 * @param {unknown} schema
 * @param {string} what
 */
export function schemaBytes(schema, what) {
  if (!(schema instanceof Schema)) throw new ProcessError(`${what} returned ${describe(schema)}, not an apache-arrow Schema`);
  return writeSchema(schema);
}

/**
 * Column names for `option<list<string>>`: undefined (all) for null.
 * @param {string[] | null | undefined} names
 */
export function columns(names) {
  if (names === null || names === undefined) return undefined;
  if (!Array.isArray(names)) throw new ProcessError(`inputColumns returned ${describe(names)}, not an array of names or null`);
  return names.map(String);
}

/** Bytes of a handle or position: a string as UTF-8. */
export function bytesOf(value, what) {
  if (value === null || value === undefined) return new Uint8Array(0);
  if (typeof value === 'string') return new TextEncoder().encode(value);
  if (value instanceof Uint8Array) return value;
  throw new ProcessError(`${what} returned ${describe(value)}; return a Uint8Array or a string`);
}

export { IpcError };
