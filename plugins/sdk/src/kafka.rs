//! The Kafka capability (`fv:host/kafka`), enabled by the SDK's `kafka`
//! feature: a native librdkafka client the host lends to the plugin.
//!
//! The topology must grant it (`allow_kafka = ["host:port"]` on the source
//! or sink); without the grant every `connect` fails with code
//! `NotGranted`. Credentials never pass through the plugin: the host adds
//! the topology's client settings and secrets itself.
//!
//! ```ignore
//! use fv_plugin_sdk::kafka::{Consumer, PartitionOffset};
//! let consumer = Consumer::connect(&["127.0.0.1:9092".into()], &[])?;
//! consumer.assign(&[PartitionOffset { topic: "bids".into(), partition: 0, offset: -2 }])?;
//! let messages = consumer.fetch(10_000, 100)?;
//! ```

pub use fv_plugin_world_kafka::fv::host::kafka::{
    Consumer, Header, KafkaError, Message, Outgoing, PartitionOffset, Producer, TopicMetadata,
};
