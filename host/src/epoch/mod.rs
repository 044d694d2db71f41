//! Epochs: the checkpoint protocol that makes output exactly-once.
//!
//! Entry points: [`EpochStore`] (manifests in the state directory, written
//! atomically — a manifest's existence is the commit point) and
//! [`Coordinator`] (starts epoch N by asking every source task to inject a
//! barrier, collects every task's acknowledgement, writes the manifest, then
//! tells the sinks to commit). Barriers travel in band behind the data
//! ([`crate::runtime::Message::Barrier`]); tasks with several inputs align.
//!
//! This module never touches rows and never calls a plugin: tasks do, when
//! the coordinator tells them to.

mod coordinator;
mod manifest;

pub use coordinator::{Ack, Coordinator, CoordinatorConfig, SinkCommand, SourceCommand};
pub use manifest::{EpochError, EpochStore, Manifest, SplitPositionRecord};
