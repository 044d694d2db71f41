// Config parsing: defaults merged under the table, configTypes checked with
// errors that name the key, and the messages the host shows.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { ConfigError, parseConfig } from 'fv-plugin';

class Typed {
  static configTypes = { min_price: 'integer', rate: 'number', column: 'string', flags: 'array' };
  static defaults = { rate: 1.0, column: 'price', flags: [] };
}

test('defaults are merged under the config, and copied', () => {
  const a = parseConfig('{"min_price": 5}', Typed);
  assert.deepEqual(a, { min_price: 5, rate: 1.0, column: 'price', flags: [] });
  a.flags.push('x');
  assert.deepEqual(parseConfig('{"min_price": 5}', Typed).flags, []);
  assert.equal(parseConfig('{"min_price": 5, "rate": 2}', Typed).rate, 2);
});

test('an empty config is an empty table', () => {
  assert.deepEqual(parseConfig('', {}), {});
  assert.deepEqual(parseConfig('  ', class {}), {});
});

test('a wrong type names the key and what was found', () => {
  assert.throws(
    () => parseConfig('{"min_price": "high"}', Typed),
    (e) => e instanceof ConfigError && e.key === 'min_price' && e.reason === 'expected an integer, found a string ("high")' &&
      e.message === 'config key `min_price`: expected an integer, found a string ("high")',
  );
  assert.throws(() => parseConfig('{"min_price": 1.5}', Typed), { key: 'min_price', reason: 'expected an integer, found a number (1.5)' });
  assert.throws(() => parseConfig('{"min_price": 1, "rate": true}', Typed), { key: 'rate', reason: 'expected a number, found a boolean (true)' });
});

test('a missing required key and an unknown key are refused', () => {
  assert.throws(() => parseConfig('{}', Typed), { reason: 'missing key `min_price`', key: undefined });
  assert.throws(() => parseConfig('{"min_price": 1, "colour": "red"}', Typed), {
    key: 'colour',
    reason: 'unknown key `colour`; expected one of `min_price`, `rate`, `column`, `flags`',
  });
});

test('without configTypes any key is accepted', () => {
  assert.deepEqual(parseConfig('{"anything": [1, 2]}', class { static defaults = { x: 1 }; }), { x: 1, anything: [1, 2] });
});

test('not JSON, or not a table', () => {
  assert.throws(() => parseConfig('{nope', {}), (e) => e instanceof ConfigError && e.reason.startsWith('the config is not JSON'));
  assert.throws(() => parseConfig('[1]', {}), { reason: 'expected a table, found an array' });
});

test('ConfigError without a key', () => {
  const e = new ConfigError('bad');
  assert.equal(e.message, 'bad');
  assert.equal(e.key, undefined);
  assert.equal(new ConfigError('bad', 'column').message, 'config key `column`: bad');
});
