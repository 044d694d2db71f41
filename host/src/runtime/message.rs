//! The messages that travel on an edge, in order.

use arrow::array::RecordBatch;

/// One message on an edge between two tasks.
#[derive(Debug, Clone)]
pub enum Message {
    /// Rows. Batches move by reference (`RecordBatch` is `Arc`-backed).
    Batch(RecordBatch),
    /// The sender has no more rows: a bounded source drained, or the run
    /// is stopping gracefully. A task ends once every input sent this.
    EndOfStream,
}
