// {{package}}: keeps the rows whose int64 `column` is above `min`.

import { column, ConfigError, exportStep, fieldOf, Keep, Step, Type } from 'fv-plugin';

/**
 * Which values to keep (the logic, testable on its own). Int64 values are
 * BigInts: `v > min` compares a BigInt with a number exactly.
 * @param {Array<bigint | null>} values
 * @param {number} min
 */
export function keep(values, min) {
  return values.map((v) => v !== null && v > min);
}

export class AboveMin extends Step {
  // The `config` table of the step in a topology (config.schema.json says
  // the same to `fvhost validate`): `column`, the int64 column to look at;
  // `min`, keep rows whose value is above this. No defaults: both required.
  static configTypes = { column: 'string', min: 'integer' };

  constructor(config, inputSchema, task) {
    super(config, inputSchema, task);
    const type = fieldOf(inputSchema, config.column)?.type;
    if (!type || type.typeId !== Type.Int || type.bitWidth !== 64 || !type.isSigned) {
      throw new ConfigError('the input needs an int64 column of this name', 'column');
    }
  }

  // Only this column crosses into the plugin.
  inputColumns() {
    return [this.config.column];
  }

  // A selection: no row data crosses back, the host keeps the rows.
  process(batch) {
    return new Keep(keep(column(batch, this.config.column), this.config.min));
  }
}

exportStep(AboveMin);
