// Log records that land in the host's `tracing` output, tagged by the host
// with the plugin and the task that emitted them.
//
// Inside a component the glue points these at the `fv:plugin/log` import
// (`setLogSink`); outside one (unit tests of plugin code under Node) they
// go to stderr.

/** @typedef {'trace' | 'debug' | 'info' | 'warn' | 'error'} Level */

/** @type {(level: Level, message: string) => void} */
let sink = (level, message) => console.error(`${level.toUpperCase()}: ${message}`);

/**
 * Where records go from now on (the component glue calls this with the
 * host's `log` import; tests may capture records with it).
 * @param {(level: Level, message: string) => void} fn
 */
export function setLogSink(fn) {
  sink = fn;
}

function emit(level, message) {
  sink(level, String(message));
}

/** @param {unknown} message */
export const trace = (message) => emit('trace', message);
/** @param {unknown} message */
export const debug = (message) => emit('debug', message);
/** @param {unknown} message */
export const info = (message) => emit('info', message);
/** @param {unknown} message */
export const warn = (message) => emit('warn', message);
/** @param {unknown} message */
export const error = (message) => emit('error', message);
