//! At-least-once delivery: one idempotent producer. `prepare` flushes, so
//! every record written before the barrier is acknowledged before the
//! epoch can complete; `commit` and `abort` have nothing to do (records
//! sent cannot be taken back: a replay after a failure writes them again).

use fv_plugin_sdk::kafka::{Outgoing, Producer};

use crate::cluster::describe;

/// The at-least-once producer.
pub struct Plain {
    producer: Option<Producer>,
    brokers: Vec<String>,
    properties: Vec<(String, String)>,
    topic: String,
    timeout_ms: u32,
    rows: u64,
}

impl Plain {
    /// Wrap a connected producer (used for the metadata check at open).
    pub fn new(
        producer: Producer,
        brokers: Vec<String>,
        properties: Vec<(String, String)>,
        topic: String,
        timeout_ms: u32,
    ) -> Self {
        Plain {
            producer: Some(producer),
            brokers,
            properties,
            topic,
            timeout_ms,
            rows: 0,
        }
    }

    /// Enqueue the records.
    pub fn write(&mut self, records: &[Outgoing]) -> Result<(), String> {
        if self.producer.is_none() {
            let producer = Producer::connect(&self.brokers, None, &self.properties)
                .map_err(|e| format!("reconnecting the producer: {}", describe(&e)))?;
            self.producer = Some(producer);
        }
        let Some(producer) = &self.producer else {
            return Err("no producer".into());
        };
        if let Err(e) = producer.send(records) {
            if e.fatal {
                // Unusable: a new producer on the next write.
                self.producer = None;
            }
            return Err(format!(
                "sending {} records to topic `{}`: {}",
                records.len(),
                self.topic,
                describe(&e)
            ));
        }
        self.rows += records.len() as u64;
        Ok(())
    }

    /// Wait until everything written is acknowledged.
    pub fn prepare(&mut self, epoch: u64) -> Result<Vec<u8>, String> {
        let rows = std::mem::take(&mut self.rows);
        if let Some(producer) = &self.producer {
            producer.flush(self.timeout_ms).map_err(|e| {
                format!(
                    "epoch {epoch}: delivering {rows} records to topic `{}`: {}",
                    self.topic,
                    describe(&e)
                )
            })?;
        }
        Ok(serde_json::json!({
            "epoch": epoch,
            "rows": rows,
            "delivery": "at_least_once",
        })
        .to_string()
        .into_bytes())
    }
}
