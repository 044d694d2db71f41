#!/usr/bin/env node
// `node build.mjs ENTRY.js --kind step|source|sink -o OUT.wasm`: a plugin
// module → a WebAssembly component.
//
// Two stages. esbuild bundles the author's entry module and the glue of
// the kind's world (src/glue/<kind>.js) into one ES module, resolving
// `fv-plugin` to this SDK and `apache-arrow` from this SDK's node_modules
// (the author's project needs no node_modules of its own). Then
// componentize-js (StarlingMonkey, a SpiderMonkey build, pre-initialised
// with the bundle) makes the component of the world `<kind>-plugin` from
// the WIT files vendored in wit/. The component carries no fvhost metadata
// yet: `fvhost plugin package` adds the package name, version and config
// schema a registry needs.
//
// Also a function: `import { build } from 'fv-plugin/build'`.

import { realpathSync } from 'node:fs';
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const SDK_ROOT = dirname(fileURLToPath(import.meta.url));
const WIT_DIR = join(SDK_ROOT, 'wit');
const KINDS = ['source', 'sink', 'step'];

/**
 * The WASI features of componentize-js the host does not provide: plugins
 * are called, they serve no requests, so the incoming-handler export is
 * left out. Outgoing HTTP stays: `fetch()` goes through the host's
 * wasi:http, under the node's `allow_http` grant (refused without one).
 * Stdio, random and clocks are linked by the host too: console.error lands
 * in the host's log, Math.random and Date.now work.
 */
const DISABLED_FEATURES = ['fetch-event'];

/** The component could not be built; the message's first line says why. */
export class BuildError extends Error {
  constructor(message) {
    super(message);
    this.name = 'BuildError';
  }
}

/**
 * Build `entry` (a plugin module that calls exportStep/exportSource/exportSink)
 * into the component `output`.
 * @param {{ entry: string, kind: 'step' | 'source' | 'sink', output?: string, log?: (line: string) => void }} options
 * @returns {Promise<{ output: string, bytes: number, bundleMs: number, componentizeMs: number }>}
 */
export async function build({ entry, kind, output, log = () => {} }) {
  if (!KINDS.includes(kind)) throw new BuildError(`--kind must be source, sink or step, not ${JSON.stringify(kind)}`);
  if (!entry) throw new BuildError('no entry module given');
  const source = resolve(entry);
  const info = await stat(source).catch(() => null);
  if (!info || !info.isFile()) throw new BuildError(`${entry}: no such file`);
  if (!['.js', '.mjs'].includes(extname(source))) throw new BuildError(`${entry}: not a JavaScript module (.js or .mjs)`);
  const out = resolve(output ?? source.replace(/\.m?js$/, '.wasm'));

  const started = Date.now();
  const bundle = await bundleEntry(source, kind);
  const bundleMs = Date.now() - started;
  log(`bundled ${entry} with esbuild: ${bundle.length} bytes of JavaScript in ${bundleMs} ms`);

  const work = await mkdtemp(join(tmpdir(), 'fv-plugin-build-'));
  try {
    // The bundle is named after the entry, so stack traces (and the line
    // map) name the plugin's file.
    const bundlePath = join(work, basename(source).replace(/\.m?js$/, '.js'));
    await writeFile(bundlePath, bundle);
    const t = Date.now();
    const component = await componentizeBundle(bundlePath, kind);
    const componentizeMs = Date.now() - t;
    await mkdir(dirname(out), { recursive: true });
    await writeFile(out, component);
    log(`componentize-js took ${componentizeMs} ms`);
    return { output: out, bytes: component.length, bundleMs, componentizeMs };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/**
 * The entry plus the kind's glue as one ES module (a string), with its line
 * map appended: the first stage of `build`, exported for tests.
 * @param {string} entry
 * @param {'step' | 'source' | 'sink'} kind
 */
export async function bundle(entry, kind) {
  return bundleEntry(resolve(entry), kind);
}

async function bundleEntry(source, kind) {
  const esbuild = await import('esbuild');
  const glue = join(SDK_ROOT, 'src', 'glue', `${kind}.js`);
  const plugin = join(SDK_ROOT, 'src', 'plugin.js');
  const name = kind[0].toUpperCase() + kind.slice(1);
  // The author's module runs first (it registers its class), then the
  // check that it did: a failing top-level statement fails the build
  // (componentize-js runs it), rather than every `open` at run time.
  const contents = [
    `import ${JSON.stringify(source)};`,
    `import { exported } from ${JSON.stringify(plugin)};`,
    `try { exported(${JSON.stringify(kind)}); } catch (e) { throw new Error(${JSON.stringify(`${basename(source)} exports no ${kind}: call export${name}(YourClass) in it`)}); }`,
    `export { ${kind} } from ${JSON.stringify(glue)};`,
  ].join('\n');
  let result;
  try {
    result = await esbuild.build({
      stdin: { contents, resolveDir: dirname(source), sourcefile: 'fv-plugin-entry.js', loader: 'js' },
      bundle: true,
      write: false,
      format: 'esm',
      platform: 'neutral',
      mainFields: ['module', 'main'],
      target: 'es2022',
      outfile: 'plugin.js',
      sourcemap: 'external',
      sourcesContent: false,
      // The host's imports: provided by the component model, not bundled.
      external: ['fv:plugin/*', 'fv:host/*'],
      plugins: [sdkResolver],
      nodePaths: [join(SDK_ROOT, 'node_modules')],
      logLevel: 'silent',
    });
  } catch (e) {
    throw new BuildError(formatEsbuildErrors(e, 'bundling'));
  }
  const js = result.outputFiles.find((f) => f.path.endsWith('.js')).text;
  const map = JSON.parse(result.outputFiles.find((f) => f.path.endsWith('.map')).text);
  return `${js}\n${lineMapScript(map, basename(source).replace(/\.m?js$/, '.js'))}\n`;
}

/** `fv-plugin` and `fv-plugin/testing` → this SDK, wherever the plugin lives. */
const sdkResolver = {
  name: 'fv-plugin',
  setup(b) {
    const entries = { 'fv-plugin': 'src/index.js', 'fv-plugin/testing': 'src/testing.js' };
    b.onResolve({ filter: /^fv-plugin(\/.*)?$/ }, (args) => {
      const file = entries[args.path];
      if (!file) return { errors: [{ text: `${args.path} cannot be bundled into a component (only 'fv-plugin' and 'fv-plugin/testing' can)` }] };
      return { path: join(SDK_ROOT, file) };
    });
  },
};

function formatEsbuildErrors(e, what) {
  const errors = e.errors ?? [];
  if (!errors.length) return `esbuild failed ${what}: ${e.message}`;
  const lines = errors.map((m) => {
    const at = m.location ? `${m.location.file}:${m.location.line}:${m.location.column + 1}: ` : '';
    const code = m.location?.lineText ? `\n    ${m.location.lineText}` : '';
    return `${at}${m.text}${code}`;
  });
  return lines.join('\n');
}

/**
 * A script defining `globalThis.__fvLineMap`: the bundle's line numbers →
 * the original file and line, so that errors sent to the host name the
 * plugin's own source (`poison_rows.js:31`), not the bundle. Appended after
 * the bundle, so that it shifts none of the bundle's lines.
 */
function lineMapScript(map, bundleName) {
  const lines = decodeFirstSegments(map.mappings);
  const files = map.sources.map((s) => s.replace(/^.*node_modules[\\/]/, '').replace(/^.*[\\/]/, ''));
  // Runs of generated lines whose original line goes up by one each line:
  // [first generated line, file index, its original line] (1-based lines).
  const runs = [];
  let prev = null;
  for (let g = 0; g < lines.length; g++) {
    const seg = lines[g];
    if (!seg) continue;
    const [src, orig] = seg;
    if (prev && prev[1] === src && prev[2] + (g + 1 - prev[0]) === orig + 1) continue;
    prev = [g + 1, src, orig + 1];
    runs.push(prev);
  }
  return `globalThis.__fvLineMap = ((file, files, runs) => ({ file, map(line) {
  let lo = 0, hi = runs.length - 1, at = -1;
  while (lo <= hi) { const mid = (lo + hi) >> 1; if (runs[mid][0] <= line) { at = mid; lo = mid + 1; } else hi = mid - 1; }
  if (at < 0) return undefined;
  const [start, src, orig] = runs[at];
  return [files[src], orig + (line - start)];
} }))(${JSON.stringify(bundleName)}, ${JSON.stringify(files)}, ${JSON.stringify(runs)});`;
}

/** Per generated line, the [source index, original line (0-based)] of its first mapped segment. */
function decodeFirstSegments(mappings) {
  const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  const out = [];
  let src = 0;
  let origLine = 0;
  for (const line of mappings.split(';')) {
    let first = null;
    for (const segment of line.split(',')) {
      if (!segment) continue;
      const fields = [];
      let value = 0;
      let shift = 0;
      for (const ch of segment) {
        const digit = B64.indexOf(ch);
        value += (digit & 31) << shift;
        if (digit & 32) {
          shift += 5;
        } else {
          fields.push(value & 1 ? -(value >>> 1) : value >>> 1);
          value = 0;
          shift = 0;
        }
      }
      // [generated column, source, original line, original column, name]:
      // source and original line are deltas that carry across lines.
      if (fields.length >= 4) {
        src += fields[1];
        origLine += fields[2];
        if (!first) first = [src, origLine];
      }
    }
    out.push(first);
  }
  return out;
}

/** componentize-js on the bundle, for the world `<kind>-plugin`. */
async function componentizeBundle(bundlePath, kind) {
  // componentize-js runs its WIT parser as a component under
  // preview2-shim, whose Node filesystem starts with no preopened
  // directory (so `jco componentize` fails with "failed to get path
  // metadata … os error 44"): open the WIT directory to it.
  const { _setPreopens } = await import('@bytecodealliance/preview2-shim/filesystem');
  _setPreopens({ [WIT_DIR]: WIT_DIR });
  const { componentize } = await import('@bytecodealliance/componentize-js');
  try {
    const { component } = await componentize({
      sourcePath: bundlePath,
      witPath: WIT_DIR,
      worldName: `${kind}-plugin`,
      disableFeatures: DISABLED_FEATURES,
    });
    return component;
  } catch (e) {
    const text = String(e?.message ?? e).trim();
    throw new BuildError(`componentize-js failed: ${text}`);
  }
}

function usage() {
  return 'usage: node build.mjs ENTRY.js --kind source|sink|step [-o OUT.wasm] [-v]';
}

/** The command line; returns the exit code. */
export async function main(argv) {
  let entry;
  let kind;
  let output;
  let verbose = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--kind') kind = argv[++i];
    else if (a.startsWith('--kind=')) kind = a.slice(7);
    else if (a === '-o' || a === '--output') output = argv[++i];
    else if (a.startsWith('--output=')) output = a.slice(9);
    else if (a === '-v' || a === '--verbose') verbose = true;
    else if (a === '-h' || a === '--help') {
      console.log(usage());
      return 0;
    } else if (a.startsWith('-') || entry) {
      console.error(`error: unexpected argument ${JSON.stringify(a)}\n${usage()}`);
      return 2;
    } else entry = a;
  }
  if (!entry || !kind) {
    console.error(`error: ${!entry ? 'no entry module' : 'no --kind'} given\n${usage()}`);
    return 2;
  }
  try {
    const { output: out, bytes } = await build({ entry, kind, output, log: verbose ? (l) => console.error(l) : undefined });
    console.log(`wrote ${output ?? out} (${bytes} bytes)`);
    return 0;
  } catch (e) {
    console.error(`error: ${e instanceof BuildError ? e.message : e?.stack ?? e}`);
    return 1;
  }
}

// Run as a script (directly or through the `fv-plugin-build` bin link).
if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  process.exitCode = await main(process.argv.slice(2));
}
