// Test plugin (e2e): a source counting 0..count-1 in one split, resumable
// from its position, with a nullable text column and a timestamp; every
// number divisible by `reject_every` is a rejected record instead of a row.
// The same plugin as the Python SDK's tests/plugins/counter.py.

import {
  exportSource,
  Field,
  FINISHED,
  fromRows,
  Int64,
  PollBatch,
  Rejected,
  Schema,
  Source,
  SplitPosition,
  TimestampMillisecond,
  Utf8,
} from 'fv-plugin';

const FULL = new Schema([
  new Field('n', new Int64(), false),
  new Field('label', new Utf8(), true),
  new Field('at', new TimestampMillisecond(), true),
]);

class Counter extends Source {
  static configTypes = { count: 'integer', batch: 'integer', reject_every: 'integer' };
  static defaults = { batch: 100, reject_every: 0 };

  constructor(config, task) {
    super(config, task);
    this.next = 0;
    this.columns = null;
  }

  schema() {
    if (this.columns === null) return FULL;
    return new Schema(FULL.fields.filter((f) => this.columns.includes(f.name)));
  }

  pushDown(scan) {
    this.columns = scan.columns;
  }

  splits() {
    return ['numbers'];
  }

  restore(positions) {
    for (const p of positions) this.next = Number(p.text());
  }

  poll(maxRows) {
    const { count, batch, reject_every: rejectEvery } = this.config;
    if (this.next >= count) return FINISHED;
    const end = Math.min(count, this.next + Math.min(maxRows, batch));
    const rows = [];
    const rejected = [];
    for (let n = this.next; n < end; n++) {
      if (rejectEvery && n % rejectEvery === 0) {
        rejected.push(new Rejected('numbers', `numbers@${n}`, 'divisible', String(n)));
        continue;
      }
      rows.push({ n, label: n % 5 === 0 ? null : `#${n}`, at: 1_700_000_000_000 + n });
    }
    this.next = end;
    return new PollBatch(fromRows(this.schema(), rows), [new SplitPosition('numbers', String(end))], rejected);
  }

  finishedSplits() {
    return this.next >= this.config.count ? ['numbers'] : [];
  }
}

exportSource(Counter);

export default Counter;
