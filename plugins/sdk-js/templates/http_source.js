// {{package}}: reads the lines of an HTTP resource (GET `url` with fetch(),
// through the host's wasi:http under the node's `allow_http`) as rows of
// one column `line`, resumable: its position is the number of lines read.

import { ConfigError, exportSource, Field, FINISHED, fromColumns, PollBatch, Schema, Source, SplitPosition, Utf8 } from 'fv-plugin';

const SCHEMA = new Schema([new Field('line', new Utf8(), false)]);

/**
 * The lines of a body (the logic, testable on its own): split at `\n`, a
 * `\r` before it dropped, no empty last line.
 * @param {string} text
 */
export function lines(text) {
  const all = text.split('\n').map((l) => l.replace(/\r$/, ''));
  if (all.length > 0 && all[all.length - 1] === '') all.pop();
  return all;
}

export class HttpLines extends Source {
  // `url`: the http:// or https:// URL whose lines become rows
  // (config.schema.json says the same).
  static configTypes = { url: 'string' };

  constructor(config, task) {
    super(config, task);
    if (!/^https?:\/\//.test(config.url)) throw new ConfigError('must be an http:// or https:// URL', 'url');
    this.lines = null;
    this.next = 0;
  }

  schema() {
    return SCHEMA;
  }

  splits() {
    return [this.config.url];
  }

  // The position is the number of lines read, as text.
  restore(positions) {
    for (const p of positions) {
      const text = p.text();
      if (!/^\d+$/.test(text)) throw new Error(`bad position \`${text}\``);
      this.next = Number(text);
    }
  }

  // Async: the call waits for fetch() within its `call_timeout`. A URL
  // outside the node's allow_http rejects with `TypeError: NetworkError`.
  async poll(maxRows) {
    if (this.lines === null) {
      const response = await fetch(this.config.url);
      if (!response.ok) throw new Error(`GET ${this.config.url} answered ${response.status}`);
      this.lines = lines(await response.text());
    }
    if (this.next >= this.lines.length) return FINISHED;
    const to = Math.min(this.next + Math.max(maxRows, 1), this.lines.length);
    const batch = fromColumns(SCHEMA, { line: this.lines.slice(this.next, to) });
    this.next = to;
    return new PollBatch(batch, [new SplitPosition(this.config.url, String(to))]);
  }
}

exportSource(HttpLines);
