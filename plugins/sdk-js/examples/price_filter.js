// An example step: keep the bids whose price is above `min_price` and add
// `price_eur` = `price * rate` (a filter and a derived column in one step,
// so it answers with a new batch). The same step as the Python SDK's
// examples/price_filter.py.
//
// Int64 values (the bids' price) are BigInts in apache-arrow: `p > minimum`
// compares a BigInt with a number exactly; `Number(p) * rate` converts
// before multiplying (BigInt * number throws).

import {
  appendFields,
  column,
  ConfigError,
  exportStep,
  Field,
  fieldOf,
  Float64,
  isInteger,
  log,
  Step,
  take,
  withColumn,
} from 'fv-plugin';

class PriceFilter extends Step {
  // min_price: keep rows whose price is above this; rate: price_eur =
  // price * rate; column: the price column.
  static configTypes = { min_price: 'integer', rate: 'number', column: 'string' };
  static defaults = { rate: 1.0, column: 'price' };

  constructor(config, inputSchema, task) {
    super(config, inputSchema, task);
    const field = fieldOf(inputSchema, config.column);
    if (!field || !isInteger(field.type)) {
      throw new ConfigError(`the input needs an integer column \`${config.column}\``, 'column');
    }
    this.eur = new Field('price_eur', new Float64(), true);
    this.schema = appendFields(inputSchema, this.eur);
    log.info(`keeping rows with ${config.column} > ${config.min_price} (task ${task.taskIndex})`);
  }

  outputSchema() {
    return this.schema;
  }

  process(batch) {
    const { min_price: minimum, rate, column: name } = this.config;
    const keep = [];
    column(batch, name).forEach((p, i) => {
      if (p !== null && p > minimum) keep.push(i);
    });
    const out = take(batch, keep);
    return withColumn(out, this.eur, column(out, name).map((p) => Number(p) * rate));
  }
}

exportStep(PriceFilter);

export default PriceFilter;
