// Component glue for the `fv:plugin/source` export: the WIT resource
// `source` wraps the class given to `exportSource`. Bundled only into
// components.

import { log } from 'fv:plugin/log@0.4.1';

import * as adapt from '../adapt.js';
import { describe, writeBatch } from '../ipc.js';
import { error as logError, setLogSink } from '../log.js';
import { describeError, FINISHED, Filter, IDLE, PollBatch, Scan, SplitPosition } from '../plugin.js';

setLogSink(log);

const OPS = { eq: '=', 'not-eq': '<>', lt: '<', 'lt-eq': '<=', gt: '>', 'gt-eq': '>=' };

const positionsIn = (positions) => positions.map((p) => new SplitPosition(p.split, p.position));

class Source {
  constructor(inner) {
    this.inner = inner;
  }

  static open(config, task) {
    return adapt.open(Source, 'source', config, null, task);
  }

  schema() {
    return adapt.schemaOf(this.inner, 'schema');
  }

  pushDown(request) {
    return adapt.result(() => {
      const filters = request.filters.map((f) => new Filter(f.column, OPS[f.op], f.value.val));
      this.inner.pushDown(new Scan(request.columns ?? null, filters));
      return adapt.schemaBytes(this.inner.schema(), 'schema');
    });
  }

  splits() {
    try {
      return this.inner.splits().map(String);
    } catch (e) {
      logError(`splits failed: ${describeError(e)}`);
      return [];
    }
  }

  restore(positions) {
    return adapt.result(() => {
      this.inner.restore(positionsIn(positions));
    });
  }

  committed(epoch, positions) {
    return adapt.result(() => {
      this.inner.committed(epoch, positionsIn(positions));
    });
  }

  // `poll` may be async (await fetch() in it): `adapt.result` settles the
  // promise within the call, then converts what it resolved to.
  poll(maxRows) {
    return adapt.result(() => this.inner.poll(maxRows), (result) => {
      if (result === IDLE) return { tag: 'idle' };
      if (result === FINISHED) return { tag: 'finished' };
      if (!(result instanceof PollBatch)) {
        throw new TypeError(`poll returned ${describe(result)}; return PollBatch, IDLE or FINISHED`);
      }
      return {
        tag: 'batch',
        val: {
          batch: writeBatch(result.batch),
          positions: result.positions.map((p) => ({ split: String(p.split), position: adapt.bytesOf(p.position, 'poll (a position)') })),
          rejected: result.rejected.map((r) => ({
            split: String(r.split),
            location: String(r.location),
            reason: String(r.reason),
            content: String(r.record),
          })),
          finished: this.inner.finishedSplits().map(String),
        },
      };
    });
  }
}

export const source = { Source };
