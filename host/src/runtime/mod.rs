//! The dataflow runtime: tasks, bounded edges, and the in-band messages.
//!
//! Read [`Message`] and [`Operator`] first: the messages that flow on an
//! edge, and the one trait whose hooks are those messages. Then
//! [`plan::plan`] (topology → opened plugins and planned queries, or
//! diagnostics) and [`executor::run`] (threads, channels, stop and failure).
//!
//! Every task is a thread; every edge is a bounded channel, so a slow sink
//! slows its sources and memory stays flat. An edge between processes
//! (a cluster member's) goes through a [`Transport`] the caller hands in
//! ([`transport`]): the runtime owns that trait and never depends on the
//! cluster module that implements it. The runtime never parses topology
//! files and never touches plugin bytes.

pub mod checkpoint;
pub mod control;
pub mod cpu;
pub mod dead_letter;
pub mod edge;
pub mod executor;
pub mod message;
pub mod metrics;
pub mod operator;
pub mod operators;
pub mod plan;
pub mod progress;
pub mod projection;
pub mod status;
pub mod tap;
pub mod transport;
pub mod watermark;

pub use control::{CommitPoint, RunControl, SealError};
pub use executor::{MemberRun, RunError, RunReport, job_tasks, run, run_member};
pub use message::{Message, Watermark};
pub use metrics::StageMetrics;
pub use operator::{Emitter, Operator, TaskError};
pub use plan::{Plan, plan};
pub use transport::{Transport, TransportError};
