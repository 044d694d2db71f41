// The example step and the e2e test plugins, run in Node through the
// testing helper, as a plugin author's own tests would: the same checks
// the Python SDK's tests make of its examples.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { ConfigError, Field, fromColumns, Int64, Schema, SplitPosition, TimestampMillisecond, Utf8 } from 'fv-plugin';
import { runSink, runSource, runStep } from 'fv-plugin/testing';

import PriceFilter from '../examples/price_filter.js';
import Counter from '../tests/plugins/counter.js';
import PoisonRows from '../tests/plugins/poison_rows.js';
import RowCounter from '../tests/plugins/row_counter.js';

const BIDS = new Schema([
  new Field('auction', new Int64(), false),
  new Field('bidder', new Int64(), false),
  new Field('price', new Int64(), false),
  new Field('channel', new Utf8(), false),
  new Field('url', new Utf8(), false),
  new Field('date_time', new TimestampMillisecond(), false),
]);

function bids(prices) {
  return fromColumns(BIDS, {
    auction: prices.map((_, i) => 1000 + i),
    bidder: prices.map((_, i) => 7 * i),
    price: prices,
    channel: prices.map((_, i) => `ch${i % 3}`),
    url: prices.map((_, i) => `https://example.com/${i}`),
    date_time: prices.map((_, i) => 1_700_000_000_000 + i),
  });
}

test('price_filter keeps the bids above min_price and adds price_eur', () => {
  const prices = [10, 5_000_001, 4_999_999, 9_007_199_254_740_993n, 5_000_000, 7_000_000];
  const { rows, deadLetters, logs } = runStep(PriceFilter, { min_price: 5_000_000, rate: 0.5 }, bids(prices));
  assert.deepEqual(deadLetters, []);
  assert.deepEqual(rows.map((r) => r.price), [5_000_001n, 9_007_199_254_740_993n, 7_000_000n]);
  assert.deepEqual(rows.map((r) => r.price_eur), [2_500_000.5, Number(9_007_199_254_740_993n) * 0.5, 3_500_000]);
  // Every input column flows on with the row.
  assert.deepEqual(rows[0], { auction: 1001n, bidder: 7n, price: 5_000_001n, channel: 'ch1', url: 'https://example.com/1', date_time: 1_700_000_000_001, price_eur: 2_500_000.5 });
  assert.deepEqual(logs, [{ level: 'info', message: 'keeping rows with price > 5000000 (task 0)' }]);
});

test('price_filter declares price_eur as a nullable float64 after the input columns', () => {
  const { step } = runStep(PriceFilter, { min_price: 1 }, bids([]));
  const fields = step.outputSchema().fields.map((f) => `${f.name}:${f.type}:${f.nullable}`);
  assert.deepEqual(fields.slice(-2), ['date_time:Timestamp<MILLISECOND>:false', 'price_eur:Float64:true']);
  assert.equal(step.config.rate, 1.0);
  assert.equal(step.config.column, 'price');
});

test('price_filter refuses an input without an integer `column`, naming the key', () => {
  assert.throws(() => runStep(PriceFilter, { min_price: 1, column: 'channel' }, bids([1])), (e) =>
    e instanceof ConfigError && e.key === 'column' && e.reason === 'the input needs an integer column `channel`');
  assert.throws(() => runStep(PriceFilter, { min_price: 'high' }, bids([1])), { key: 'min_price', reason: 'expected an integer, found a string ("high")' });
  assert.throws(() => runStep(PriceFilter, {}, bids([1])), { reason: 'missing key `min_price`' });
});

test('poison_rows dead-letters exactly the poison rows, with the reason and where', () => {
  const seq = [...Array(300).keys()];
  const input = fromColumns(new Schema([new Field('seq', new Int64(), false), new Field('ts', new TimestampMillisecond(), false)]), {
    seq,
    ts: seq.map((n) => 1_700_000_000_000 + n),
  });
  const { rows, deadLetters } = runStep(PoisonRows, { modulus: 97, poison: 13 }, input);
  assert.deepEqual(rows.map((r) => r.seq), seq.filter((n) => n % 97 !== 13).map(BigInt));
  assert.ok(rows.every((r) => r.half === Number(r.seq) / 2));
  assert.deepEqual(deadLetters.map((d) => d.row.seq), [13n, 110n, 207n]);
  for (const d of deadLetters) {
    assert.match(d.message, new RegExp(`^Error: seq ${d.row.seq} is poison \\(at poison_rows\\.js:\\d+ in processRow\\)$`));
  }
});

test('counter counts, rejects, resumes from its position and narrows to the columns read', () => {
  const { rows, rejected, positions, finished } = runSource(Counter, { count: 250, batch: 64, reject_every: 100 });
  assert.ok(finished);
  assert.deepEqual(rows.map((r) => Number(r.n)), [...Array(250).keys()].filter((n) => n % 100 !== 0));
  assert.deepEqual(rows[0], { n: 1n, label: '#1', at: 1_700_000_000_001 });
  assert.equal(rows.find((r) => r.n === 5n).label, null);
  assert.deepEqual(rejected.map((r) => r.record), ['0', '100', '200']);
  assert.equal(new TextDecoder().decode(positions.get('numbers')), '250');

  const resumed = runSource(Counter, { count: 250 }, { positions: [new SplitPosition('numbers', '240')] });
  assert.deepEqual(resumed.rows.map((r) => Number(r.n)), [240, 241, 242, 243, 244, 245, 246, 247, 248, 249]);

  const narrow = new Counter({ count: 1, batch: 1, reject_every: 0 }, null);
  narrow.pushDown({ columns: ['n'] });
  assert.deepEqual(narrow.schema().fields.map((f) => f.name), ['n']);
  assert.deepEqual(narrow.poll(1).batch.schema.fields.map((f) => f.name), ['n']);
});

test('row_counter reads no column, counts the rows of the epoch and logs them on commit', () => {
  const input = fromColumns(new Schema([new Field('seq', new Int64(), false)]), { seq: [1, 2, 3, 4] });
  const { handle, logs, sink } = runSink(RowCounter, {}, [input, input], { epoch: 7n });
  assert.deepEqual(sink.inputColumns(), []);
  assert.equal(new TextDecoder().decode(handle), '8');
  assert.deepEqual(logs, [{ level: 'info', message: 'epoch 7: 8 rows' }]);
  assert.throws(() => runSink(RowCounter, { path: 'x' }, input), { key: 'path', reason: 'unknown key `path`; the config takes no keys' });
});
