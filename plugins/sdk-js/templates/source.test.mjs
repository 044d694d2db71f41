// {{package}}: the source's logic and the source itself, in Node (`npm test`).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { SplitPosition } from 'fv-plugin';
import { checkConfigSchema, runSource } from 'fv-plugin/testing';

import { Counter, rows } from './{{module}}.js';

test('rows are the half-open range', () => {
  assert.equal(rows(3, 6).numRows, 3);
});

test('the source counts to count, then finishes; a restart resumes', () => {
  const run = runSource(Counter, { count: 10 }, { maxRows: 4 });
  assert.ok(run.finished);
  assert.deepEqual(run.rows.map((r) => r.n), [0n, 1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n]);
  const resumed = runSource(Counter, { count: 10 }, { positions: [new SplitPosition('counter', '8')] });
  assert.deepEqual(resumed.rows.map((r) => r.n), [8n, 9n]);
});

test('a negative count is refused, naming the key', () => {
  assert.throws(() => runSource(Counter, { count: -1 }), { key: 'count' });
});

// config.schema.json (what `fvhost validate` checks topologies against)
// and Counter.configTypes (what `open` parses) agree.
test('the config schema matches the config types', () => {
  checkConfigSchema(Counter, readFileSync(new URL('./config.schema.json', import.meta.url), 'utf8'), { count: 10 });
});
