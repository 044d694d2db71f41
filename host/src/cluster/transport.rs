//! The runtime's [`Transport`] as a Kafka cluster: the settings of a
//! cluster member open a run's exchange topics ([`Exchanges`]) and carry
//! its side of the epoch protocol through the control topics
//! ([`ControlBridge`]).
//!
//! Whoever runs a topology with a `[cluster]` table hands these settings
//! to the runtime ([`ClusterSettings::transport`]); the runtime never
//! reaches into this module on its own. This module only adapts: what a
//! topic holds and how it is read is [`super::exchange`]'s and
//! [`super::control`]'s.

use std::sync::Arc;

use super::ClusterSettings;
use super::control::{ControlBridge, acks_topic, commands_topic};
use super::exchange::{Exchanges, Offsets};
use crate::epoch::Generation;
use crate::runtime::transport::{EpochBridge, EpochSide, RemoteEdges, Transport, TransportError};
use crate::runtime::{MemberRun, RunControl};

impl ClusterSettings {
    /// These settings as the runtime's transport.
    pub fn transport(&self) -> &dyn Transport {
        self
    }
}

impl Transport for ClusterSettings {
    fn address(&self) -> &str {
        &self.brokers
    }

    fn edges(
        &self,
        topology: &str,
        generation: Generation,
        control: Arc<RunControl>,
        starts: Offsets,
    ) -> Result<Box<dyn RemoteEdges>, TransportError> {
        Ok(Box::new(Exchanges::new(
            self, topology, generation, control, starts,
        )?))
    }

    fn epoch_bridge(
        &self,
        topology: &str,
        member: &MemberRun,
        side: EpochSide,
        control: &Arc<RunControl>,
    ) -> Result<Box<dyn EpochBridge>, TransportError> {
        // Each control topic has one partition; the round recorded where
        // it ended, so nothing of an older generation is read.
        let start = |topic: String| {
            member
                .round
                .starts
                .get(&topic)
                .and_then(|p| p.get(&0))
                .copied()
                .unwrap_or(0)
        };
        let finished = Arc::clone(&member.finished);
        let bridge = match side {
            EpochSide::Coordinator {
                sources,
                sinks,
                acks,
            } => ControlBridge::coordinator(
                self,
                topology,
                member.generation,
                start(acks_topic(topology)),
                sources,
                sinks,
                acks,
                control,
                finished,
            )?,
            EpochSide::Member {
                sources,
                sinks,
                acks,
            } => ControlBridge::member(
                self,
                topology,
                member.generation,
                start(commands_topic(topology)),
                sources,
                sinks,
                acks,
                control,
                finished,
            )?,
        };
        Ok(Box::new(bridge))
    }
}
