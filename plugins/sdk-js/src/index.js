// fv-plugin: write fvhost plugins in JavaScript.
//
// An fvhost plugin is a WebAssembly component that is a source, a sink or a
// step. With this package you subclass Source, Sink or Step (or RowStep)
// over apache-arrow RecordBatches, export the class with exportStep (…),
// and build the component with `node build.mjs` (esbuild + componentize-js).
// The SDK does the rest: Arrow IPC at the boundary, the config parsed from
// JSON with errors that name the key, the WIT glue of the `fv:plugin`
// contract, and logging into the host. `fvhost plugin package` then writes
// the metadata a registry needs.
//
// A step that keeps rows whose price is above a threshold:
//
//     import { Step, Keep, column, exportStep } from 'fv-plugin';
//
//     class AboveMin extends Step {
//       static configTypes = { min_price: 'integer' };
//       inputColumns() { return ['price']; }
//       process(batch) {
//         return new Keep(column(batch, 'price').map((p) => p !== null && p > this.config.min_price));
//       }
//     }
//     exportStep(AboveMin);
//
// Everything an author needs is exported from here, apache-arrow's types
// included, so a plugin imports only from 'fv-plugin'.

import * as log from './log.js';

export { log };
export { ConfigError, parseConfig } from './config.js';
export { IpcError, maskBits, readBatch, readSchema, writeBatch, writeSchema } from './ipc.js';
export {
  appendFields,
  ArrowTypeError,
  column,
  columnOf,
  fieldOf,
  fromColumns,
  fromRows,
  isBigIntType,
  isInteger,
  rows,
  take,
  withColumn,
} from './batch.js';
export {
  BadRows,
  Columns,
  exportSink,
  exportSource,
  exportStep,
  FINISHED,
  Filter,
  IDLE,
  Keep,
  PollBatch,
  ProcessError,
  Rejected,
  RowError,
  RowStep,
  Scan,
  Sink,
  Source,
  SplitPosition,
  Step,
  TaskContext,
  describeError,
} from './plugin.js';

// apache-arrow: the data types, schemas and batches plugins work with.
export {
  Binary,
  Bool,
  DataType,
  Date_,
  DateDay,
  DateMillisecond,
  Decimal,
  Dictionary,
  Duration,
  DurationMicrosecond,
  DurationMillisecond,
  DurationNanosecond,
  DurationSecond,
  Field,
  Float16,
  Float32,
  Float64,
  Int8,
  Int16,
  Int32,
  Int64,
  LargeBinary,
  LargeUtf8,
  List,
  Null,
  RecordBatch,
  RecordBatchReader,
  RecordBatchStreamWriter,
  Schema,
  Struct,
  Table,
  TimeMicrosecond,
  TimeMillisecond,
  TimeNanosecond,
  TimeSecond,
  Timestamp,
  TimestampMicrosecond,
  TimestampMillisecond,
  TimestampNanosecond,
  TimestampSecond,
  TimeUnit,
  Type,
  Uint8,
  Uint16,
  Uint32,
  Uint64,
  Utf8,
  Vector,
  tableFromArrays,
  tableFromIPC,
  tableToIPC,
  vectorFromArray,
} from 'apache-arrow';

/** The `fv:plugin` contract version this SDK builds plugins for. */
export const CONTRACT_VERSION = '0.4.1';
/** This SDK's version. */
export const VERSION = '0.1.0';
