//! The messages that travel on an edge, in order.

use arrow::array::RecordBatch;

/// One message on an edge between two tasks.
#[derive(Debug, Clone)]
pub enum Message {
    /// Rows. Batches move by reference (`RecordBatch` is `Arc`-backed).
    Batch(RecordBatch),
    /// Epoch `N` starts after this point of the stream. A task with several
    /// inputs holds back an input that delivered barrier N until every input
    /// has (alignment), then snapshots and forwards it.
    Barrier(u64),
    /// The sender has no more rows: a bounded source drained, or the run
    /// is stopping gracefully. A task ends once every input sent this.
    EndOfStream,
}
