// Running a plugin class in Node as the host would run the component, for
// unit tests: open it with a config, feed it batches through the same
// boundary encoding (IPC bytes both ways), and apply its answers the way
// the host does (a Keep filters the input, Columns replace or append,
// BadRows are dead-lettered and the rest processed again).
//
//     import { runStep } from 'fv-plugin/testing';
//     const { rows, deadLetters } = runStep(PriceFilter, { min_price: 10 }, table);

import { RecordBatch, Table } from 'apache-arrow';

import * as adapt from './adapt.js';
import { parseConfig } from './config.js';
import { fromColumns, rows as batchRows, take } from './batch.js';
import { emptyBatch, readBatch, readSchema, writeBatch } from './ipc.js';
import { setLogSink } from './log.js';
import { BadRows, describeError, FINISHED, IDLE, PollBatch, ProcessError, raisingRows, TaskContext } from './plugin.js';

const TASK = new TaskContext('test', 'plugin', 0, 1);

function batchesOf(input) {
  if (input instanceof Table) return input.batches.length ? input.batches : [emptyBatch(input.schema)];
  if (input instanceof RecordBatch) return [input];
  if (Array.isArray(input) && input.every((b) => b instanceof RecordBatch)) return input;
  throw new TypeError('the input is an apache-arrow Table, a RecordBatch or an array of RecordBatches');
}

/** Capture log records while `f` runs. */
function capturingLogs(f) {
  const logs = [];
  setLogSink((level, message) => logs.push({ level, message }));
  try {
    return [f(), logs];
  } finally {
    setLogSink((level, message) => console.error(`${level.toUpperCase()}: ${message}`));
  }
}

/** Project `batch` to `names` (undefined: all), in that order, as the host does before `process`. */
function project(batch, names) {
  if (!names) return batch;
  const indices = names.map((n) => {
    const i = batch.schema.fields.findIndex((f) => f.name === n);
    if (i < 0) throw new ProcessError(`inputColumns names \`${n}\`, which the input does not have`);
    return i;
  });
  return batch.selectAt(indices);
}

/** The host's merge of a Columns answer into the input. */
function mergeColumns(input, columns, output) {
  const values = {};
  for (const f of columns.schema.fields) {
    if (!output.fields.some((g) => g.name === f.name)) {
      throw new ProcessError(`returned column \`${f.name}\`, which its output schema does not declare`);
    }
  }
  for (const f of output.fields) {
    const v = columns.getChild(f.name) ?? input.getChild(f.name);
    if (!v) throw new ProcessError(`its output column \`${f.name}\` was not returned`);
    values[f.name] = Array.from(v);
  }
  return fromColumns(output, values);
}

/**
 * Open the step class `cls` with `config` on `input`'s schema, process
 * every batch of `input`, and return what the host would pass on.
 * @param {Function} cls a Step subclass
 * @param {Record<string, any> | string} config the config table (or its JSON)
 * @param {Table | RecordBatch | RecordBatch[]} input
 * @param {{ task?: TaskContext }} [options]
 * @returns {{ batches: RecordBatch[], rows: Record<string, any>[], deadLetters: { row: Record<string, any>, message: string }[], logs: { level: string, message: string }[], step: any }}
 */
export function runStep(cls, config, input, { task = TASK } = {}) {
  const batches = batchesOf(input);
  const [result, logs] = capturingLogs(() => {
    const text = typeof config === 'string' ? config : JSON.stringify(config ?? {});
    const schemaBytes = writeBatch(emptyBatch(batches[0].schema));
    const step = adapt.openInstance('step', text, schemaBytes, task, cls);
    const output = readSchema(adapt.schemaBytes(step.outputSchema(), 'outputSchema'));
    const names = adapt.columns(step.inputColumns());
    const out = [];
    const deadLetters = [];
    const run = (batch) => {
      const sent = readBatch(writeBatch(project(batch, names)));
      let kind, bytes;
      try {
        try {
          [kind, bytes] = adapt.stepOutput(step.process(sent), sent.numRows);
        } catch (e) {
          if (e instanceof BadRows || e instanceof ProcessError) throw e;
          // Poison rows, isolated as the component's glue does.
          const found = raisingRows((part) => step.process(part), sent, e);
          if (!found.length || (found.length === sent.numRows && sent.numRows > 1)) throw e;
          throw new BadRows(found);
        }
      } catch (e) {
        if (!(e instanceof BadRows)) throw new ProcessError(`process failed: ${describeError(e)}`);
        const bad = new Map(e.rows.map((r) => [r.row, r.message]));
        if (!bad.size) throw new ProcessError('reported bad rows but named none');
        for (const [i, message] of bad) {
          if (i < 0 || i >= batch.numRows) throw new ProcessError(`named row ${i} as bad in a batch of ${batch.numRows} rows`);
          deadLetters.push({ row: batchRows(take(batch, [i]))[0], message });
        }
        const rest = [...Array(batch.numRows).keys()].filter((i) => !bad.has(i));
        if (rest.length) run(take(batch, rest));
        return;
      }
      if (kind === 'keep') {
        const kept = [...Array(batch.numRows).keys()].filter((i) => bytes[i >> 3] & (1 << (i & 7)));
        out.push(take(batch, kept));
      } else if (kind === 'columns') {
        out.push(mergeColumns(batch, readBatch(bytes), output));
      } else {
        const b = readBatch(bytes);
        const declared = output.fields.map((f) => `${f.name}: ${f.type}${f.nullable ? '' : ' not null'}`).join(', ');
        const actual = b.schema.fields.map((f) => `${f.name}: ${f.type}${f.nullable ? '' : ' not null'}`).join(', ');
        if (declared !== actual) throw new ProcessError(`returned a batch with schema ${actual} but declared ${declared}`);
        out.push(b);
      }
    };
    for (const b of batches) run(b);
    return { batches: out, rows: out.flatMap(batchRows), deadLetters, step };
  });
  return { ...result, logs };
}

/**
 * Open the source class `cls` with `config` and poll it until FINISHED
 * (or `maxPolls` polls), `maxRows` rows a poll.
 * @param {Function} cls a Source subclass
 * @param {Record<string, any> | string} config
 * @param {{ maxRows?: number, maxPolls?: number, positions?: import('./plugin.js').SplitPosition[], task?: TaskContext }} [options]
 * @returns {{ rows: Record<string, any>[], batches: RecordBatch[], positions: Map<string, Uint8Array>, rejected: import('./plugin.js').Rejected[], finished: boolean, logs: object[], source: any }}
 */
export function runSource(cls, config, { maxRows = 1024, maxPolls = 10_000, positions = [], task = TASK } = {}) {
  const [result, logs] = capturingLogs(() => {
    const text = typeof config === 'string' ? config : JSON.stringify(config ?? {});
    const source = adapt.openInstance('source', text, null, task, cls);
    const schema = readSchema(adapt.schemaBytes(source.schema(), 'schema'));
    source.restore(positions);
    const batches = [];
    const rejected = [];
    const at = new Map(positions.map((p) => [p.split, p.position]));
    let finished = false;
    for (let i = 0; i < maxPolls && !finished; i++) {
      const r = source.poll(maxRows);
      if (r === FINISHED) finished = true;
      else if (r === IDLE) continue;
      else if (r instanceof PollBatch) {
        const b = readBatch(writeBatch(r.batch));
        const declared = schema.fields.map((f) => `${f.name}: ${f.type}`).join(', ');
        const actual = b.schema.fields.map((f) => `${f.name}: ${f.type}`).join(', ');
        if (declared !== actual) throw new ProcessError(`poll returned a batch with schema ${actual} but schema() says ${declared}`);
        batches.push(b);
        rejected.push(...r.rejected);
        for (const p of r.positions) at.set(p.split, adapt.bytesOf(p.position, 'poll (a position)'));
      } else throw new ProcessError(`poll returned ${String(r)}; return PollBatch, IDLE or FINISHED`);
    }
    return { rows: batches.flatMap(batchRows), batches, positions: at, rejected, finished, source };
  });
  return { ...result, logs };
}

/**
 * Open the sink class `cls` with `config` on `input`'s schema, write each
 * batch of `input` in one epoch (1), prepare and commit it.
 * @param {Function} cls a Sink subclass
 * @param {Record<string, any> | string} config
 * @param {Table | RecordBatch | RecordBatch[]} input
 * @param {{ epoch?: bigint, task?: TaskContext }} [options]
 * @returns {{ handle: Uint8Array, logs: object[], sink: any }}
 */
export function runSink(cls, config, input, { epoch = 1n, task = TASK } = {}) {
  const batches = batchesOf(input);
  const [result, logs] = capturingLogs(() => {
    const text = typeof config === 'string' ? config : JSON.stringify(config ?? {});
    const sink = adapt.openInstance('sink', text, writeBatch(emptyBatch(batches[0].schema)), task, cls);
    const names = adapt.columns(sink.inputColumns());
    for (const b of batches) sink.write(readBatch(writeBatch(project(b, names))));
    const handle = adapt.bytesOf(sink.prepare(epoch), 'prepare');
    sink.commit(epoch, handle);
    return { handle, sink };
  });
  return { ...result, logs };
}

/**
 * Check that a plugin's `config.schema.json` (what `fvhost validate`
 * checks topologies against) and its class's `configTypes` and `defaults`
 * (what `open` parses) agree, and that `example` parses; throws an Error
 * saying where they differ.
 * @param {Function} cls the plugin class
 * @param {string | object} schema the JSON Schema (text or parsed)
 * @param {Record<string, any>} example a config the plugin accepts
 */
export function checkConfigSchema(cls, schema, example) {
  const s = typeof schema === 'string' ? JSON.parse(schema) : schema;
  const types = cls.configTypes;
  const defaults = cls.defaults ?? {};
  const problems = [];
  if (!types) problems.push(`${cls.name} has no static configTypes to compare with`);
  else {
    const props = s.properties ?? {};
    for (const [key, prop] of Object.entries(props)) {
      if (!(key in types)) problems.push(`\`${key}\` is in the schema but not in ${cls.name}.configTypes`);
      else if (types[key] !== 'any' && prop.type && prop.type !== types[key]) {
        problems.push(`\`${key}\` is ${JSON.stringify(prop.type)} in the schema but '${types[key]}' in ${cls.name}.configTypes`);
      }
    }
    for (const key of Object.keys(types)) if (!(key in props)) problems.push(`\`${key}\` is in ${cls.name}.configTypes but not in the schema`);
    const required = new Set(s.required ?? []);
    for (const key of Object.keys(types)) {
      const optional = key in defaults;
      if (optional && required.has(key)) problems.push(`\`${key}\` has a default in ${cls.name}.defaults but the schema requires it`);
      if (!optional && !required.has(key)) problems.push(`\`${key}\` has no default in ${cls.name}.defaults but the schema does not require it`);
    }
    if (s.additionalProperties !== false) problems.push('the schema allows unknown keys ("additionalProperties": false is missing), which configTypes refuses');
  }
  if (problems.length) throw new Error(`config schema and ${cls.name} differ:\n  ${problems.join('\n  ')}`);
  parseConfig(JSON.stringify(example), cls);
}
