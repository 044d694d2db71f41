//! The Kafka capability (`fv:host/kafka`): a native librdkafka client lent
//! to the plugins a topology grants it to.
//!
//! This module owns the grant ([`KafkaGrant`]): which bootstrap brokers a
//! plugin may name, and the client settings and secrets the topology adds
//! to every client the plugin opens. It must never let a plugin choose its
//! own brokers outside the grant, set credentials, or see the secrets —
//! and never print a property value (any may be a secret) in a log, an
//! error or a status record.

mod consumer;
mod host;
pub mod lag;
mod producer;

use std::fmt;

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError as RdError;

use super::bindings::kafka::fv::host::kafka::KafkaError;

pub use consumer::KafkaConsumer;
pub use producer::KafkaProducer;

/// What a topology grants one source or sink: `allow_kafka`, plus its
/// `kafka_client` settings and `kafka_secrets`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaGrant {
    /// Bootstrap brokers (`host:port`) the plugin may connect to.
    pub brokers: Vec<String>,
    /// Client properties from the topology (security protocol, SASL
    /// mechanism, TLS file paths, …), applied to every client.
    pub properties: Vec<(String, String)>,
    /// Secret properties: (property, value read from the environment
    /// variable the topology named). Never shown anywhere.
    pub secrets: Vec<(String, String)>,
}

impl fmt::Debug for KafkaGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values of client properties may be credentials: names only.
        f.debug_struct("KafkaGrant")
            .field("brokers", &self.brokers)
            .field(
                "properties",
                &self.properties.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field(
                "secrets",
                &self.secrets.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Property names (or prefixes, ending in `.`) a plugin may not set: they
/// choose brokers, credentials, or load native code.
const RESERVED: &[&str] = &[
    "bootstrap.servers",
    "metadata.broker.list",
    "security.protocol",
    "sasl.",
    "ssl.",
    "ssl_key",
    "plugin.library.paths",
    "client.dns.lookup",
    "transactional.id",
    "debug",
];

/// Whether a plugin may set property `name` itself.
pub fn plugin_may_set(name: &str) -> bool {
    let name = name.trim().to_ascii_lowercase();
    !RESERVED.iter().any(|r| {
        if r.ends_with('.') {
            name.starts_with(r)
        } else {
            name == *r
        }
    })
}

/// A `host:port` in the form grants are compared in.
pub fn normalize_broker(broker: &str) -> String {
    broker.trim().to_ascii_lowercase()
}

impl KafkaGrant {
    /// The client configuration for a plugin's request: its brokers (each
    /// checked against the grant), its own properties (reserved names
    /// refused), then the topology's settings and secrets, which win.
    pub(crate) fn client_config(
        grant: Option<&KafkaGrant>,
        brokers: &[String],
        properties: &[(String, String)],
    ) -> Result<ClientConfig, KafkaError> {
        let Some(grant) = grant else {
            return Err(refusal(
                "NotGranted",
                "this plugin has no Kafka grant: add `allow_kafka = [\"host:port\"]` to its source or sink in the topology".into(),
            ));
        };
        if brokers.is_empty() {
            return Err(refusal("BadConfig", "no brokers given".into()));
        }
        for broker in brokers {
            let b = normalize_broker(broker);
            if !grant.brokers.iter().any(|g| normalize_broker(g) == b) {
                return Err(refusal(
                    "NotGranted",
                    format!(
                        "broker `{broker}` is not in this plugin's grant (allow_kafka = {:?})",
                        grant.brokers
                    ),
                ));
            }
        }
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", brokers.join(","));
        for (name, value) in properties {
            if !plugin_may_set(name) {
                return Err(refusal(
                    "BadConfig",
                    format!(
                        "a plugin may not set the client property `{name}`: brokers and credentials come from the topology (`kafka_client`, `kafka_secrets`)"
                    ),
                ));
            }
            config.set(name, value);
        }
        for (name, value) in grant.properties.iter().chain(&grant.secrets) {
            config.set(name, value);
        }
        Ok(config)
    }
}

/// A refusal by the host (not an error of librdkafka).
pub(crate) fn refusal(code: &str, message: String) -> KafkaError {
    KafkaError {
        code: code.to_string(),
        message,
        retriable: false,
        fatal: false,
        txn_requires_abort: false,
    }
}

/// librdkafka's error, with `context` (topic/partition, the call) first.
pub(crate) fn to_wit(context: &str, e: &RdError) -> KafkaError {
    let code = e
        .rdkafka_error_code()
        .map(|c| format!("{c:?}"))
        .unwrap_or_else(|| "ClientError".to_string());
    let (retriable, fatal, txn_requires_abort) = match e {
        RdError::Transaction(t) => (t.is_retriable(), t.is_fatal(), t.txn_requires_abort()),
        _ => (false, false, false),
    };
    KafkaError {
        code,
        message: format!("{context}: {e}"),
        retriable,
        fatal,
        txn_requires_abort,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> KafkaGrant {
        KafkaGrant {
            brokers: vec!["127.0.0.1:9092".into()],
            properties: vec![("security.protocol".into(), "SASL_PLAINTEXT".into())],
            secrets: vec![("sasl.password".into(), "hunter2".into())],
        }
    }

    #[test]
    fn refuses_without_a_grant_and_outside_it() {
        let e =
            KafkaGrant::client_config(None, &["127.0.0.1:9092".into()], &[]).expect_err("no grant");
        assert_eq!(e.code, "NotGranted");
        assert!(e.message.contains("allow_kafka"), "{}", e.message);
        let e = KafkaGrant::client_config(Some(&grant()), &["10.0.0.1:9092".into()], &[])
            .expect_err("outside");
        assert_eq!(e.code, "NotGranted");
        assert!(e.message.contains("10.0.0.1:9092"), "{}", e.message);
    }

    #[test]
    fn plugins_cannot_set_brokers_or_credentials() {
        for name in [
            "bootstrap.servers",
            "sasl.username",
            "SSL.key.location",
            "debug",
        ] {
            let e = KafkaGrant::client_config(
                Some(&grant()),
                &["127.0.0.1:9092".into()],
                &[(name.into(), "x".into())],
            )
            .expect_err(name);
            assert_eq!(e.code, "BadConfig", "{name}");
        }
        let config = KafkaGrant::client_config(
            Some(&grant()),
            &["127.0.0.1:9092".into()],
            &[("group.id".into(), "g".into())],
        )
        .expect("allowed");
        assert_eq!(config.get("group.id"), Some("g"));
        assert_eq!(config.get("sasl.password"), Some("hunter2"));
    }

    #[test]
    fn debug_output_never_shows_values() {
        let text = format!("{:?}", grant());
        assert!(
            !text.contains("hunter2") && !text.contains("SASL_PLAINTEXT"),
            "{text}"
        );
        assert!(text.contains("sasl.password"), "{text}");
    }
}
