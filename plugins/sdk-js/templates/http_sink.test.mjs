// {{package}}: the sink's logic and the sink itself, in Node (`npm test`):
// Node has fetch() too, so the sink POSTs to a real local server here.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';

import { Field, fromColumns, Int64, Schema, TaskContext } from 'fv-plugin';
import { checkConfigSchema } from 'fv-plugin/testing';

import { body, committed, EpochPoster } from './{{module}}.js';

const TASK = new TaskContext('test', 'plugin', 0, 1);
const SCHEMA = new Schema([new Field('n', new Int64(), false)]);
const received = [];
let server;
let base;

before(async () => {
  server = createServer((req, res) => {
    let data = '';
    req.on('data', (chunk) => (data += chunk));
    req.on('end', () => {
      received.push([req.url, req.headers['idempotency-key'], JSON.parse(data)]);
      res.writeHead(req.url === '/epochs' ? 204 : 500).end();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${server.address().port}`;
});

after(() => server.close());

test('the body names the task, epoch and rows', () => {
  assert.equal(body(1, 7n, 42), '{"task":1,"epoch":7,"rows":42}');
});

test('a success or a known key commits', () => {
  assert.ok([200, 204, 409].every(committed));
  assert.ok(![404, 500].some(committed));
});

test('an epoch posts its row count under its key on commit', async () => {
  received.length = 0;
  const sink = new EpochPoster({ url: `${base}/epochs` }, SCHEMA, TASK);
  sink.write(fromColumns(SCHEMA, { n: [1, 2, 3] }));
  sink.write(fromColumns(SCHEMA, { n: [4] }));
  await sink.commit(3n, sink.prepare(3n));
  assert.deepEqual(received, [['/epochs', 'test/plugin/0/3', { task: 0, epoch: 3, rows: 4 }]]);
});

test('a failed POST fails the commit, naming the status', async () => {
  const sink = new EpochPoster({ url: `${base}/broken` }, SCHEMA, TASK);
  await assert.rejects(sink.commit(1n, sink.prepare(1n)), /answered 500/);
});

// config.schema.json (what `fvhost validate` checks topologies against)
// and EpochPoster.configTypes (what `open` parses) agree.
test('the config schema matches the config types', () => {
  checkConfigSchema(EpochPoster, readFileSync(new URL('./config.schema.json', import.meta.url), 'utf8'), { url: 'http://127.0.0.1:8080/epochs' });
});
