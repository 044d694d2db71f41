// Test plugin (e2e): a batch step that throws on any batch holding a row
// whose `seq % modulus == poison`. The SDK isolates those rows as the host
// isolates the rows a Rust step traps on: they, and only they, are
// dead-lettered with the error; the other rows flow on. The same plugin as
// the Python SDK's tests/plugins/poison_batch.py.

import { exportStep, Field, Float64, fromColumns, Int64, Schema, Step } from 'fv-plugin';

class PoisonBatch extends Step {
  static configTypes = { modulus: 'integer', poison: 'integer' };

  constructor(config, inputSchema, task) {
    super(config, inputSchema, task);
    this.schema = new Schema([new Field('seq', new Int64(), false), new Field('half', new Float64(), true)]);
  }

  inputColumns() {
    return ['seq'];
  }

  outputSchema() {
    return this.schema;
  }

  process(batch) {
    const seqs = [...batch.getChild('seq')];
    for (const seq of seqs) {
      if (seq % BigInt(this.config.modulus) === BigInt(this.config.poison)) {
        throw new Error(`seq ${seq} is poison`);
      }
    }
    return fromColumns(this.schema, { seq: seqs, half: seqs.map((s) => Number(s) / 2) });
  }
}

exportStep(PoisonBatch);

export default PoisonBatch;
