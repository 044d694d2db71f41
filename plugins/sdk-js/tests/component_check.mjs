#!/usr/bin/env node
// `node plugins/sdk-js/tests/component_check.mjs`: builds the example step
// and the three test plugins into components, runs each in Node through
// jco's transpiler (the component model in JavaScript, WASI from
// preview2-shim, the host's `log` import captured) and checks their
// answers: config errors with their key, the step's rows, dead-lettered
// rows naming the plugin's file and line, a source's batches, positions
// and rejected records, a sink reading no column. About 90 s (four builds).
// Not part of `node --test test/` (too slow); fvhost's e2e tests run the
// same components in the real host.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import * as A from 'apache-arrow';

import { build } from '../build.mjs';

const SDK = fileURLToPath(new URL('..', import.meta.url));
const work = await mkdtemp(join(tmpdir(), 'fv-component-check-'));
const task = { topology: 't', stage: 's', taskIndex: 0, parallelism: 1 };
const ipc = (table) => A.tableToIPC(table, 'stream');

/** Build `entry` as `kind`, transpile it, and import its exports. */
async function load(entry, kind, name) {
  const wasm = join(work, `${name}.wasm`);
  const { bytes } = await build({ entry: join(SDK, entry), kind, output: wasm });
  execFileSync(join(SDK, 'node_modules/.bin/jco'), [
    'transpile', wasm, '-o', join(work, name), '--no-typescript', '--quiet',
    '--map', 'fv:plugin/log@0.4.0=../log.js', '--map', 'fv:plugin/types@0.4.0=../types.js',
  ]);
  console.log(`built ${entry} (${bytes} bytes)`);
  return import(join(work, name, `${name}.js`));
}

try {
  await symlink(join(SDK, 'node_modules'), join(work, 'node_modules'));
  await writeFile(join(work, 'log.js'), 'export const records = [];\nexport function log(level, message) { records.push([level, message]); }\n');
  await writeFile(join(work, 'types.js'), 'export {};\n');
  const { records } = await import(join(work, 'log.js'));

  // The example step: bids above min_price, price_eur added.
  const { step: pf } = await load('examples/price_filter.js', 'step', 'price_filter');
  const price = BigInt64Array.from([10n, 5_000_001n, 4_999_999n, 7_000_000n]);
  const bids = A.tableFromArrays({ auction: BigInt64Array.from([1n, 2n, 3n, 4n]), price, channel: ['a', 'b', 'c', 'd'] });
  assert.throws(() => pf.Step.open('{"min_price": "high"}', ipc(new A.Table(bids.schema)), task), (e) =>
    e.payload.key === 'min_price' && e.payload.message === 'expected an integer, found a string ("high")');
  assert.throws(() => pf.Step.open('{"min_price": 1, "column": "channel"}', ipc(new A.Table(bids.schema)), task), (e) =>
    e.payload.key === 'column' && e.payload.message === 'the input needs an integer column `channel`');
  const filter = pf.Step.open('{"min_price": 5000000, "rate": 0.5}', ipc(new A.Table(bids.schema)), task);
  assert.deepEqual(A.tableFromIPC(filter.outputSchema()).schema.fields.map((f) => `${f.name}:${f.type}`).slice(-1), ['price_eur:Float64']);
  const out = filter.process(ipc(bids));
  assert.equal(out.tag, 'batch');
  const rows = A.tableFromIPC(out.val).toArray().map((r) => [r.price, r.price_eur]);
  assert.deepEqual(rows, [[5_000_001n, 2_500_000.5], [7_000_000n, 3_500_000]]);
  assert.deepEqual(records.splice(0), [['info', 'keeping rows with price > 5000000 (task 0)']]);

  // A RowStep throwing on some rows: those rows, with the reason and the line.
  const { step: poison } = await load('tests/plugins/poison_rows.js', 'step', 'poison_rows');
  const seqs = A.tableFromArrays({ seq: BigInt64Array.from({ length: 200 }, (_, i) => BigInt(i)) });
  const p = poison.Step.open('{"modulus": 97, "poison": 13}', ipc(new A.Table(seqs.schema)), task);
  assert.deepEqual(p.inputColumns(), ['seq']);
  assert.throws(() => p.process(ipc(seqs)), (e) => {
    assert.equal(e.payload.tag, 'bad-rows');
    assert.deepEqual(e.payload.val.map((r) => r.row), [13, 110]);
    assert.match(e.payload.val[0].message, /^Error: seq 13 is poison \(at poison_rows\.js:\d+ in processRow\)$/);
    return true;
  });

  // A source: schema, push-down, restore, batches, rejected records, the end.
  const { source } = await load('tests/plugins/counter.js', 'source', 'counter');
  const c = source.Source.open('{"count": 250, "batch": 64, "reject_every": 100}', task);
  assert.deepEqual(c.splits(), ['numbers']);
  assert.deepEqual(A.tableFromIPC(c.pushDown({ columns: ['n'], filters: [{ column: 'n', op: 'gt', value: { tag: 'int', val: 5n } }] })).schema.fields.map((f) => f.name), ['n']);
  c.restore([{ split: 'numbers', position: new TextEncoder().encode('60') }]);
  let n = 0;
  const rejected = [];
  let last;
  for (let r = c.poll(1000); r.tag === 'batch'; r = c.poll(1000)) {
    n += A.tableFromIPC(r.val.batch).numRows;
    rejected.push(...r.val.rejected.map((x) => x.content));
    last = r.val;
  }
  assert.equal(n, 188);
  assert.deepEqual(rejected, ['100', '200']);
  assert.equal(new TextDecoder().decode(last.positions[0].position), '250');
  assert.deepEqual(last.finished, ['numbers']);

  // A sink reading no column: row counts only.
  const { sink } = await load('tests/plugins/row_counter.js', 'sink', 'row_counter');
  const s = sink.Sink.open('{}', ipc(new A.Table(seqs.schema)), task);
  assert.deepEqual(s.inputColumns(), []);
  s.write(ipc(new A.Table(seqs.batches[0].select([]))));
  const handle = s.prepare(5n);
  s.commit(5n, handle);
  assert.deepEqual(records.splice(0), [['info', 'epoch 5: 200 rows']]);

  console.log('component check: 4 passed, 0 failed');
} finally {
  await rm(work, { recursive: true, force: true });
}
