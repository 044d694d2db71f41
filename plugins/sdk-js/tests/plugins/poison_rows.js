// Test plugin (e2e): a row-at-a-time step that throws on the rows whose
// `seq % modulus == poison`; those rows, and only those, are dead-lettered.
// The same plugin as the Python SDK's tests/plugins/poison_rows.py.

import { exportStep, Field, Float64, Int64, RowStep, Schema } from 'fv-plugin';

class PoisonRows extends RowStep {
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

  processRow(row) {
    const seq = row.seq; // a BigInt (Int64)
    if (seq % BigInt(this.config.modulus) === BigInt(this.config.poison)) {
      throw new Error(`seq ${seq} is poison`);
    }
    return { seq, half: Number(seq) / 2 };
  }
}

exportStep(PoisonRows);

export default PoisonRows;
