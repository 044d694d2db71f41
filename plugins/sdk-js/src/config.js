// The plugin's `config` table: the JSON the host passes, parsed into a
// plain object, with the class's `static defaults` merged under it and,
// when the class declares `static configTypes`, every key checked with
// errors that name the key (as the Python SDK's dataclasses and the Rust
// SDK's `deny_unknown_fields` do).

/**
 * Why a plugin refused its configuration. The host reports it with the
 * topology file, line and key, and refuses to start the topology.
 */
export class ConfigError extends Error {
  /**
   * @param {string} message what is wrong and, where it helps, what would be right
   * @param {string} [key] the dotted path of the key at fault inside the `config` table (`columns.0`)
   */
  constructor(message, key) {
    super(key ? `config key \`${key}\`: ${message}` : message);
    this.name = 'ConfigError';
    /** The message without the key. */
    this.reason = message;
    /** @type {string | undefined} */
    this.key = key ?? undefined;
  }
}

/**
 * The kinds `static configTypes` may name. A key of `configTypes` without a
 * value in `defaults` is required; a key of the config not in `configTypes`
 * is refused.
 * @typedef {'integer' | 'number' | 'string' | 'boolean' | 'array' | 'object' | 'any'} ConfigType
 */

const CHECKS = {
  integer: [(v) => typeof v === 'number' && Number.isInteger(v), 'an integer'],
  number: [(v) => typeof v === 'number', 'a number'],
  string: [(v) => typeof v === 'string', 'a string'],
  boolean: [(v) => typeof v === 'boolean', 'a boolean'],
  array: [(v) => Array.isArray(v), 'an array'],
  object: [(v) => isTable(v), 'a table'],
  any: [() => true, 'anything'],
};

function isTable(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** How a JSON value is named in errors: `a string ("high")`. */
export function describeValue(v) {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'boolean') return `a boolean (${v})`;
  if (typeof v === 'number') return `a number (${v})`;
  if (typeof v === 'string') return `a string (${JSON.stringify(v)})`;
  if (Array.isArray(v)) return 'an array';
  return 'a table';
}

/**
 * Parse the host's JSON `text` for the plugin class `cls`: `cls.defaults`
 * under the parsed table, checked against `cls.configTypes` when it has one.
 * @param {string} text
 * @param {{ defaults?: object, configTypes?: Record<string, ConfigType> }} [cls]
 * @returns {Record<string, any>}
 */
export function parseConfig(text, cls = {}) {
  let value;
  try {
    value = text && text.trim() ? JSON.parse(text) : {};
  } catch (e) {
    throw new ConfigError(`the config is not JSON: ${e.message}`);
  }
  if (!isTable(value)) throw new ConfigError(`expected a table, found ${describeValue(value)}`);
  const types = cls.configTypes;
  const defaults = cls.defaults ?? {};
  if (types) {
    for (const key of Object.keys(value)) {
      if (!(key in types)) {
        const expected = Object.keys(types).map((k) => `\`${k}\``).join(', ');
        const hint = expected ? `expected one of ${expected}` : 'the config takes no keys';
        throw new ConfigError(`unknown key \`${key}\`; ${hint}`, key);
      }
    }
    for (const [key, type] of Object.entries(types)) {
      if (!(key in value)) {
        if (key in defaults) continue;
        throw new ConfigError(`missing key \`${key}\``);
      }
      const check = CHECKS[type];
      if (!check) throw new ConfigError(`configTypes.${key}: unknown type ${JSON.stringify(type)} (one of ${Object.keys(CHECKS).join(', ')})`);
      if (!check[0](value[key])) {
        throw new ConfigError(`expected ${check[1]}, found ${describeValue(value[key])}`, key);
      }
    }
  }
  // Defaults are copied, so that an instance mutating its config never
  // changes the class's defaults (or another task's config).
  return { ...JSON.parse(JSON.stringify(defaults)), ...value };
}
