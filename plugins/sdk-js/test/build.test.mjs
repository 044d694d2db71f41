// The build's first stage (esbuild), which is fast: the bundle resolves
// `fv-plugin` to this SDK wherever the plugin lives, its line map names the
// plugin's own file and line, and an error names file:line:column first.
// (Making the component takes ~20 s; the e2e tests and build.mjs do that.)

import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { build, BuildError, bundle } from 'fv-plugin/build';

const POISON = fileURLToPath(new URL('../tests/plugins/poison_rows.js', import.meta.url));

test('the bundle holds the plugin and the glue, and imports only the host', async () => {
  const js = await bundle(POISON, 'step');
  assert.match(js, /PoisonRows = class extends RowStep/);
  assert.match(js, /export \{\s*step\s*\}/);
  const imports = [...js.matchAll(/^import .* from "([^"]+)";$/gm)].map((m) => m[1]);
  assert.deepEqual(imports, ['fv:plugin/log@0.4.1']);
});

test('the line map leads from the bundle back to the plugin source', async () => {
  const js = await bundle(POISON, 'step');
  const lines = js.split('\n');
  const at = lines.findIndex((l) => l.includes('is poison')) + 1;
  const script = lines.find((l) => l.startsWith('globalThis.__fvLineMap'));
  const scope = {};
  new Function('globalThis', `${script}\n${lines.slice(lines.indexOf(script) + 1).join('\n')}`)(scope);
  const source = (await readFile(POISON, 'utf8')).split('\n');
  const want = source.findIndex((l) => l.includes('is poison')) + 1;
  assert.equal(scope.__fvLineMap.file, 'poison_rows.js');
  assert.deepEqual(scope.__fvLineMap.map(at), ['poison_rows.js', want]);
});

test('a syntax error names file, line and column on the first line', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'fv-build-test-'));
  try {
    const file = join(dir, 'broken.js');
    await writeFile(file, "import { Step } from 'fv-plugin';\nclass X extends Step {\n  process( {\n}\n");
    await assert.rejects(build({ entry: file, kind: 'step' }), (e) => e instanceof BuildError && /broken\.js:5:1: Expected "\)" but found end of file$/.test(e.message.split('\n')[0]));
    await writeFile(file, "import { nothing } from 'left-pad-never';\n");
    await assert.rejects(bundle(file, 'step'), /broken\.js:1:\d+: Could not resolve "left-pad-never"/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('a wrong kind or a missing entry is refused before any work', async () => {
  await assert.rejects(build({ entry: POISON, kind: 'filter' }), /--kind must be source, sink or step, not "filter"/);
  await assert.rejects(build({ entry: 'nope.js', kind: 'step' }), /nope\.js: no such file/);
});
