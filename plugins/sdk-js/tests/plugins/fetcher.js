// Test plugin (e2e): an async step that GETs `url` with fetch() once per
// batch and appends the answer (`<status> <body>`) as a column `answer`:
// outgoing HTTP through the host's wasi:http, under the node's allow_http.

import { appendFields, exportStep, Field, Step, Utf8, withColumn } from 'fv-plugin';

class Fetcher extends Step {
  static configTypes = { url: 'string' };

  constructor(config, inputSchema, task) {
    super(config, inputSchema, task);
    this.field = new Field('answer', new Utf8(), false);
    this.schema = appendFields(inputSchema, this.field);
  }

  outputSchema() {
    return this.schema;
  }

  async process(batch) {
    const response = await fetch(this.config.url);
    const text = `${response.status} ${await response.text()}`;
    return withColumn(batch, this.field, Array.from({ length: batch.numRows }, () => text));
  }
}

exportStep(Fetcher);

export default Fetcher;
