// {{package}}: counts from 0 to `count` (one split), resumable.

import { ConfigError, exportSource, Field, FINISHED, fromColumns, Int64, PollBatch, Schema, Source, SplitPosition } from 'fv-plugin';

const SCHEMA = new Schema([new Field('n', new Int64(), false)]);

/**
 * The rows `from..to` (the logic, testable on its own).
 * @param {number} from
 * @param {number} to
 */
export function rows(from, to) {
  const n = [];
  for (let i = from; i < to; i++) n.push(i);
  return fromColumns(SCHEMA, { n });
}

export class Counter extends Source {
  // `count`: how many rows to produce (config.schema.json says the same).
  static configTypes = { count: 'integer' };

  constructor(config, task) {
    super(config, task);
    if (config.count < 0) throw new ConfigError('must be >= 0', 'count');
    this.next = 0;
  }

  schema() {
    return SCHEMA;
  }

  splits() {
    return ['counter'];
  }

  // The position is the next number, as text: what `poll` hands the host.
  restore(positions) {
    for (const p of positions) {
      const text = p.text();
      if (!/^\d+$/.test(text)) throw new Error(`bad position \`${text}\``);
      this.next = Number(text);
    }
  }

  poll(maxRows) {
    if (this.next >= this.config.count) return FINISHED;
    const to = Math.min(this.next + maxRows, this.config.count);
    const batch = rows(this.next, to);
    this.next = to;
    return new PollBatch(batch, [new SplitPosition('counter', String(to))]);
  }
}

exportSource(Counter);
