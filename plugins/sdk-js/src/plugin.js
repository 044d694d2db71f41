// The three plugin kinds — Source, Sink, Step (and RowStep) — mirroring the
// Python and Rust SDKs, the answers their methods return and the errors
// they throw, and the registry of the class a component exports.
//
// A plugin module defines one subclass and exports it:
//
//     exportStep(PriceFilter);
//
// The glue modules (src/glue/*.js, which `build.mjs` bundles with the
// plugin) look the class up here when the host opens an instance and
// translate between the `fv:plugin` WIT types and these classes.

import { ConfigError } from './config.js';
import { fromRows, rows as batchRows, take } from './batch.js';

/** Where the plugin instance runs. */
export class TaskContext {
  /**
   * @param {string} topology topology name
   * @param {string} stage name of the source, stage or sink in the topology
   * @param {number} taskIndex index of this task within its stage
   * @param {number} parallelism number of tasks of this stage
   */
  constructor(topology, stage, taskIndex, parallelism) {
    this.topology = topology;
    this.stage = stage;
    this.taskIndex = taskIndex;
    this.parallelism = parallelism;
    Object.freeze(this);
  }
}

// --- step --------------------------------------------------------------------

/**
 * Keep the input rows whose mask value is true (null counts as false). The
 * cheapest answer for a filter: no row data crosses back.
 */
export class Keep {
  /** @param {ArrayLike<boolean | null | undefined>} mask one value per input row */
  constructor(mask) {
    this.mask = mask;
  }
}

/**
 * Columns to replace (same name) or append, one value per input row; the
 * input columns not named here flow on unchanged in the host. Every column
 * must be declared by `outputSchema()`.
 */
export class Columns {
  /** @param {import('apache-arrow').RecordBatch | import('apache-arrow').Table} batch */
  constructor(batch) {
    this.batch = batch;
  }
}

/** One row a step could not process: its index in the batch given to `process`. */
export class RowError {
  /**
   * @param {number} row
   * @param {string} message
   */
  constructor(row, message) {
    this.row = row;
    this.message = message;
    Object.freeze(this);
  }
}

/**
 * These rows are poison: the host sends them to the dead-letter output and
 * calls `process` again with the other rows.
 */
export class BadRows extends Error {
  /** @param {RowError[]} rows */
  constructor(rows) {
    const list = [...rows];
    super(`${list.length} bad row(s): ` + list.slice(0, 3).map((r) => `row ${r.row}: ${r.message}`).join('; '));
    this.name = 'BadRows';
    this.rows = list;
  }
}

/**
 * The batch failed as a whole; the stage fails with this message.
 *
 * Any other error thrown by `process` is taken as poison data, the way a
 * Rust step's trap is: the SDK calls `process` again on halves of the
 * batch to find the rows it throws on, and those rows go to the
 * dead-letter output with the error (name, message, where); the rest
 * flows on. If it throws on every row of a batch of several, or on no
 * row alone, the batch fails as a whole with that error.
 */
export class ProcessError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ProcessError';
  }
}

/**
 * The rows of `batch` on which `process` throws (it threw `error` on the
 * whole batch), found by bisection: each as a `RowError` with what
 * `process` threw on that row alone.
 * @param {(batch: any) => unknown} process
 * @param {any} batch
 * @param {unknown} error
 * @returns {RowError[]}
 */
export function raisingRows(process, batch, error) {
  const bad = [];
  const search = (rows, thrown) => {
    if (thrown === undefined) {
      try {
        process(take(batch, rows));
        return;
      } catch (e) {
        thrown = e;
      }
    }
    if (rows.length === 1) {
      bad.push(new RowError(rows[0], describeError(thrown)));
      return;
    }
    const mid = rows.length >> 1;
    search(rows.slice(0, mid), undefined);
    search(rows.slice(mid), undefined);
  };
  search([...Array(batch.numRows).keys()], error);
  return bad;
}

/**
 * A step plugin: batch in, batch (or selection) out.
 *
 * Subclass it, optionally set `static defaults` (merged under the config)
 * and `static configTypes` (each key's type; checked, unknown keys refused),
 * and implement `outputSchema` and `process`. `process` returns a `Keep`,
 * a `Columns` or a RecordBatch of `outputSchema()` with any number of rows,
 * throws `BadRows` for poison rows and anything else to fail the stage.
 */
export class Step {
  /**
   * Create the instance for one task. Throw `ConfigError` to refuse the
   * config: the topology then fails before any data moves.
   * @param {Record<string, any>} config the `config` table, parsed
   * @param {import('apache-arrow').Schema} inputSchema
   * @param {TaskContext} task
   */
  constructor(config, inputSchema, task) {
    this.config = config;
    this.inputSchema = inputSchema;
    this.task = task;
  }

  /**
   * The input columns `process` reads; null (the default) means all. Only
   * these cross the boundary.
   * @returns {string[] | null}
   */
  inputColumns() {
    return null;
  }

  /**
   * The schema of the rows leaving the step. Default: the input schema.
   * @returns {import('apache-arrow').Schema}
   */
  outputSchema() {
    return this.inputSchema;
  }

  /**
   * @param {import('apache-arrow').RecordBatch} batch the input, projected to `inputColumns()`
   * @returns {Keep | Columns | import('apache-arrow').RecordBatch | import('apache-arrow').Table}
   */
  process(batch) {
    throw new Error(`${this.constructor.name}.process is not implemented`);
  }
}

/**
 * A step written one row at a time.
 *
 * `processRow(row)` gets a row as a plain object (the columns of
 * `inputColumns()`; BigInt for 64-bit integers) and returns the output row
 * as an object keyed by `outputSchema()`'s names (a missing key is null),
 * or null to drop the row. A row whose `processRow` throws is
 * dead-lettered with the error as its reason; the other rows flow on.
 */
export class RowStep extends Step {
  /**
   * @param {Record<string, any>} row
   * @returns {Record<string, any> | null}
   */
  processRow(row) {
    throw new Error(`${this.constructor.name}.processRow is not implemented`);
  }

  process(batch) {
    const out = [];
    const bad = [];
    const input = batchRows(batch);
    for (let i = 0; i < input.length; i++) {
      let result;
      try {
        result = this.processRow(input[i]);
      } catch (e) {
        bad.push(new RowError(i, describeError(e)));
        continue;
      }
      if (result !== null && result !== undefined) out.push(result);
    }
    if (bad.length) throw new BadRows(bad);
    return fromRows(this.outputSchema(), out);
  }
}

// --- source ------------------------------------------------------------------

/**
 * Where one split has got to. The bytes are yours: the host stores them in
 * its checkpoints and hands them back to `Source.restore`.
 */
export class SplitPosition {
  /**
   * @param {string} split
   * @param {Uint8Array | string} position bytes (a string is stored as UTF-8)
   */
  constructor(split, position) {
    this.split = split;
    this.position = typeof position === 'string' ? new TextEncoder().encode(position) : position;
  }

  /** The position as UTF-8 text (for positions written as strings). */
  text() {
    return new TextDecoder().decode(this.position);
  }
}

/** A record a source read but could not turn into a row (dead-lettered). */
export class Rejected {
  /**
   * @param {string} split the split it came from
   * @param {string} location where in the split (`topic/partition@offset`, `file:line`)
   * @param {string} reason why it was rejected
   * @param {string} record the record itself, as text
   */
  constructor(split, location, reason, record) {
    this.split = split;
    this.location = location;
    this.reason = reason;
    this.record = record;
  }
}

/**
 * A batch (of `Source.schema()`) and the positions of every split it
 * advanced, after this batch and its rejected records.
 */
export class PollBatch {
  /**
   * @param {import('apache-arrow').RecordBatch | import('apache-arrow').Table} batch
   * @param {SplitPosition[]} [positions]
   * @param {Rejected[]} [rejected]
   */
  constructor(batch, positions = [], rejected = []) {
    this.batch = batch;
    this.positions = positions;
    this.rejected = rejected;
  }
}

/** Nothing ready now; the host polls again shortly. */
export const IDLE = Object.freeze({ toString: () => 'IDLE' });
/** Every split is drained; a bounded source ends here. */
export const FINISHED = Object.freeze({ toString: () => 'FINISHED' });

/** `column op value`: `op` is one of `= <> < <= > >=`; an integer value is a BigInt. */
export class Filter {
  /**
   * @param {string} column
   * @param {'=' | '<>' | '<' | '<=' | '>' | '>='} op
   * @param {bigint | number | string | boolean} value
   */
  constructor(column, op, value) {
    this.column = column;
    this.op = op;
    this.value = value;
    Object.freeze(this);
  }
}

/** What the topology reads of a source (see `Source.pushDown`). */
export class Scan {
  /**
   * @param {string[] | null} columns null: all
   * @param {Filter[]} [filters]
   */
  constructor(columns = null, filters = []) {
    this.columns = columns;
    this.filters = filters;
  }

  /** Whether `column` is read (always, when no projection was asked). */
  reads(column) {
    return this.columns === null || this.columns.includes(column);
  }
}

/**
 * A source plugin: produces batches and the positions it reached.
 *
 * Implement `schema`, `splits`, `restore` and `poll`; `poll` returns a
 * `PollBatch`, `IDLE` or `FINISHED`, and throws anything to fail the stage.
 */
export class Source {
  /**
   * @param {Record<string, any>} config
   * @param {TaskContext} task
   */
  constructor(config, task) {
    this.config = config;
    this.task = task;
  }

  /** @returns {import('apache-arrow').Schema} */
  schema() {
    throw new Error(`${this.constructor.name}.schema is not implemented`);
  }

  /**
   * Read only `scan.columns` from now on (and make `schema()` say so).
   * Called at most once, before `restore`. Default: read all.
   * @param {Scan} scan
   */
  pushDown(scan) {}

  /** @returns {string[]} */
  splits() {
    throw new Error(`${this.constructor.name}.splits is not implemented`);
  }

  /**
   * Seek to recorded positions (called before the first poll).
   * @param {SplitPosition[]} positions
   */
  restore(positions) {}

  /**
   * @param {number} maxRows
   * @returns {PollBatch | typeof IDLE | typeof FINISHED}
   */
  poll(maxRows) {
    throw new Error(`${this.constructor.name}.poll is not implemented`);
  }

  /**
   * The splits drained since the last call (asked after every batch).
   * @returns {string[]}
   */
  finishedSplits() {
    return [];
  }

  /**
   * Epoch `epoch` is committed with these positions. Default: nothing.
   * @param {bigint} epoch
   * @param {SplitPosition[]} positions
   */
  committed(epoch, positions) {}
}

// --- sink --------------------------------------------------------------------

/**
 * A sink plugin: writes batches and takes part in each epoch's two-phase
 * commit (`write`… → `prepare(n)` → `commit(n, handle)`, or `abort(n)`).
 * `commit` must be idempotent: it is replayed after a crash. Throw anything
 * to fail the stage. Epochs are BigInts.
 */
export class Sink {
  /**
   * @param {Record<string, any>} config
   * @param {import('apache-arrow').Schema} inputSchema
   * @param {TaskContext} task
   */
  constructor(config, inputSchema, task) {
    this.config = config;
    this.inputSchema = inputSchema;
    this.task = task;
  }

  /**
   * The columns `write` reads, in order; null: all; `[]`: none (a row counter).
   * @returns {string[] | null}
   */
  inputColumns() {
    return null;
  }

  /** @param {import('apache-arrow').RecordBatch} batch */
  write(batch) {
    throw new Error(`${this.constructor.name}.write is not implemented`);
  }

  /**
   * Pre-commit everything written for `epoch`; the handle returned is
   * stored by the host and given back to `commit`.
   * @param {bigint} epoch
   * @returns {Uint8Array | string}
   */
  prepare(epoch) {
    return new Uint8Array(0);
  }

  /**
   * @param {bigint} epoch
   * @param {Uint8Array} handle
   */
  commit(epoch, handle) {}

  /** @param {bigint} epoch */
  abort(epoch) {}
}

// --- export ------------------------------------------------------------------

const BASES = { step: Step, source: Source, sink: Sink };
const EXPORTED = new Map();

function exportAs(kind, cls) {
  const base = BASES[kind];
  if (typeof cls !== 'function' || !(cls.prototype instanceof base)) {
    throw new TypeError(`export${base.name}(…) takes a subclass of ${base.name} from 'fv-plugin', not ${cls?.name ?? String(cls)}`);
  }
  EXPORTED.set(kind, cls);
  return cls;
}

/** Export `cls` (a `Step` subclass) as this component's step. @template T @param {T} cls @returns {T} */
export const exportStep = (cls) => exportAs('step', cls);
/** Export `cls` (a `Source` subclass) as this component's source. @template T @param {T} cls @returns {T} */
export const exportSource = (cls) => exportAs('source', cls);
/** Export `cls` (a `Sink` subclass) as this component's sink. @template T @param {T} cls @returns {T} */
export const exportSink = (cls) => exportAs('sink', cls);

/**
 * The class exported as `kind`; a ConfigError saying how to export one if none was.
 * @param {'step' | 'source' | 'sink'} kind
 */
export function exported(kind) {
  const cls = EXPORTED.get(kind);
  if (!cls) {
    const name = kind[0].toUpperCase() + kind.slice(1);
    throw new ConfigError(`the component exports no ${kind} class: call export${name}(YourClass) in the plugin module`);
  }
  return cls;
}

/**
 * `Name: message (at file:line in function)`, for errors sent to the host.
 * Where the error was thrown is the first frame of its stack, mapped back
 * to the plugin's own source file when the component carries a line map
 * (see build.mjs).
 * @param {unknown} e
 * @returns {string}
 */
export function describeError(e) {
  if (!(e instanceof Error)) return `thrown: ${String(e)}`;
  let text = `${e.name}: ${e.message}`;
  let where;
  try {
    where = throwSite(e);
  } catch {
    // Describing an error must never throw: the glue reports with it.
  }
  if (where) text += ` (at ${where})`;
  return text;
}

/** The `file:line in function` of the innermost stack frame, or undefined. */
function throwSite(e) {
  const stack = typeof e.stack === 'string' ? e.stack : '';
  for (const line of stack.split('\n')) {
    // SpiderMonkey: `fn@file:line:col`; V8: `    at fn (file:line:col)` or `    at file:line:col`.
    const m = /^\s*(?:at\s+)?(?:(.*?)@|(.*?)\s+\()?(.*?):(\d+):\d+\)?$/.exec(line);
    if (!m) continue;
    const fn = m[1] ?? m[2] ?? '';
    let file = m[3].replace(/^.*[\\/]/, '');
    let lineNo = Number(m[4]);
    // Inside a component: the bundle's line → the plugin's own file and line.
    const lineMap = globalThis.__fvLineMap;
    if (lineMap && file === lineMap.file) {
      const mapped = lineMap.map(lineNo);
      if (mapped) [file, lineNo] = mapped;
    }
    const name = fn.replace(/^.*[.#]/, '');
    return `${file}:${lineNo}${name ? ` in ${name}` : ''}`;
  }
  return undefined;
}
