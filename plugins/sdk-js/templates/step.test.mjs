// {{package}}: the step's logic and the step itself, in Node (`npm test`).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { Field, fromColumns, Int64, Schema } from 'fv-plugin';
import { checkConfigSchema, runStep } from 'fv-plugin/testing';

import { AboveMin, keep } from './{{module}}.js';

test('keeps values above min and drops nulls', () => {
  assert.deepEqual(keep([1n, 5n, null, 9n], 4), [false, true, false, true]);
});

test('the step keeps the rows whose column is above min', () => {
  const input = fromColumns(new Schema([new Field('price', new Int64(), true)]), { price: [1, 5, null, 9] });
  const { rows } = runStep(AboveMin, { column: 'price', min: 4 }, input);
  assert.deepEqual(rows, [{ price: 5n }, { price: 9n }]);
});

// config.schema.json (what `fvhost validate` checks topologies against)
// and AboveMin.configTypes (what `open` parses) agree.
test('the config schema matches the config types', () => {
  checkConfigSchema(AboveMin, readFileSync(new URL('./config.schema.json', import.meta.url), 'utf8'), { column: 'price', min: 100 });
});
