//! Epochs: the checkpoint protocol that makes output exactly-once.
//!
//! Entry points: [`EpochStore`] (manifests and state snapshots in a local
//! directory or an object store; a manifest's existence is the commit
//! point), [`restore::newest_restorable`] (the newest epoch whose state
//! verifies) and
//! [`Coordinator`] (starts epoch N by asking every source task to inject a
//! barrier, collects every task's acknowledgement, writes the manifest, then
//! tells the sinks to commit). Barriers travel in band behind the data
//! ([`crate::runtime::Message::Barrier`]); tasks with several inputs align.
//!
//! This module never touches rows and never calls a plugin: tasks do, when
//! the coordinator tells them to.

mod aws_profile;
mod coordinator;
mod fault;
mod fence;
mod generation;
mod lease;
mod lock;
mod manifest;
mod placement;
pub mod restore;
mod store;

pub use coordinator::{Ack, Coordinator, CoordinatorConfig, OnCommit, SinkCommand, SourceCommand};
pub use fault::{InjectedFault, POINTS as FAULT_POINTS, fault_point};
pub use fence::{Fenced, fence_older_generations};
pub use generation::{Generation, JobRound};
pub use lease::{EpochLease, LEASE_KEY, LeaseError};
pub use lock::{LockError, StateLock};
pub use manifest::{Manifest, SinkHandleRecord, SplitPositionRecord, StageState};
pub use placement::{FailedGeneration, MemberReport, Proposal};
pub use restore::{Restored, newest_restorable, restorable_at};
pub(crate) use store::cloud_store;
pub use store::{EpochError, EpochStore};
