// {{package}}: the source's logic and the source itself, in Node (`npm test`):
// Node has fetch() too, so the source reads a real local server here.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';

import { FINISHED, SplitPosition, TaskContext } from 'fv-plugin';
import { checkConfigSchema } from 'fv-plugin/testing';

import { HttpLines, lines } from './{{module}}.js';

const TASK = new TaskContext('test', 'plugin', 0, 1);
let server;
let base;

before(async () => {
  server = createServer((req, res) => {
    if (req.url === '/lines.txt') res.end('first\r\nsecond\n\nfourth\n');
    else res.writeHead(404).end('no such file');
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${server.address().port}`;
});

after(() => server.close());

/** Poll `source` until it finishes: its lines and last position. */
async function drain(source, maxRows) {
  const out = [];
  let position;
  for (;;) {
    const r = await source.poll(maxRows);
    if (r === FINISHED) return { out, position };
    out.push(...r.batch.toArray().map((row) => row.line));
    position = r.positions[0].text();
  }
}

test('a body splits into its lines', () => {
  assert.deepEqual(lines('a\r\nb\n\nc'), ['a', 'b', '', 'c']);
  assert.deepEqual(lines(''), []);
});

test('the source reads every line, then finishes; a restart resumes', async () => {
  const url = `${base}/lines.txt`;
  const { out, position } = await drain(new HttpLines({ url }, TASK), 3);
  assert.deepEqual(out, ['first', 'second', '', 'fourth']);
  assert.equal(position, '4');
  const resumed = new HttpLines({ url }, TASK);
  resumed.restore([new SplitPosition(url, '2')]);
  assert.deepEqual((await drain(resumed, 10)).out, ['', 'fourth']);
});

test('an error status stops it, naming the URL', async () => {
  await assert.rejects(new HttpLines({ url: `${base}/missing` }, TASK).poll(10), /answered 404/);
});

test('a URL that is not http is refused, naming the key', () => {
  assert.throws(() => new HttpLines({ url: 'ftp://example.com/x' }, TASK), { key: 'url' });
});

// config.schema.json (what `fvhost validate` checks topologies against)
// and HttpLines.configTypes (what `open` parses) agree.
test('the config schema matches the config types', () => {
  checkConfigSchema(HttpLines, readFileSync(new URL('./config.schema.json', import.meta.url), 'utf8'), { url: 'http://127.0.0.1:8080/lines.txt' });
});
