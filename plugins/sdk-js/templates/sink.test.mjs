// {{package}}: the sink's logic and the sink itself, in Node (`npm test`).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { Field, fromColumns, Int64, Schema } from 'fv-plugin';
import { checkConfigSchema, runSink } from 'fv-plugin/testing';

import { handle, RowCounter } from './{{module}}.js';

test('the handle is the row count', () => {
  assert.equal(handle(42), '42');
});

test('the sink counts the rows of an epoch and logs them on commit', () => {
  const batch = fromColumns(new Schema([new Field('n', new Int64(), false)]), { n: [1, 2, 3] });
  const { logs } = runSink(RowCounter, {}, [batch, batch], { epoch: 3n });
  assert.deepEqual(logs, [{ level: 'info', message: 'epoch 3: 6 rows' }]);
});

// config.schema.json (what `fvhost validate` checks topologies against)
// and RowCounter.configTypes (what `open` parses) agree.
test('the config schema matches the config types', () => {
  checkConfigSchema(RowCounter, readFileSync(new URL('./config.schema.json', import.meta.url), 'utf8'), {});
});
