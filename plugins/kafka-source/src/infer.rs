//! JSON without a declared `schema`: infer the columns from a sample read
//! with a throwaway consumer. The sample is the first messages of every
//! partition of the selected topics, in sorted partition order, so every
//! task of the stage samples — and infers — the same thing. Declaring the
//! schema is recommended: a sample can miss fields and types can differ.

use std::time::{Duration, Instant};

use fv_plugin_sdk::arrow_schema::Field;
use fv_plugin_sdk::kafka::{Consumer, PartitionOffset};
use fv_plugin_sdk::{ConfigError, log};
use serde_json::Value;

use crate::cluster::describe;
use crate::config::Settings;

/// Infer the value columns from up to `max_messages` messages.
pub fn infer(
    settings: &Settings,
    partitions: &[(String, i32)],
    max_messages: usize,
) -> Result<Vec<Field>, ConfigError> {
    let fail = |what: String| {
        ConfigError::at(
            "schema",
            format!("cannot infer the JSON schema ({what}); declare `schema`"),
        )
    };
    let consumer = Consumer::connect(&settings.brokers, &settings.properties)
        .map_err(|e| fail(format!("connecting: {}", describe(&e))))?;
    let mut values: Vec<Value> = Vec::new();
    let mut read = 0usize;
    for (topic, partition) in partitions {
        if read >= max_messages {
            break;
        }
        let (low, high) = consumer
            .watermarks(topic, *partition, settings.metadata_timeout_ms)
            .map_err(|e| {
                fail(format!(
                    "watermarks of {topic}/{partition}: {}",
                    describe(&e)
                ))
            })?;
        if high <= low {
            continue;
        }
        let want = usize::try_from(high - low)
            .unwrap_or(usize::MAX)
            .min(max_messages - read);
        consumer
            .assign(&[PartitionOffset {
                topic: topic.clone(),
                partition: *partition,
                offset: low,
            }])
            .map_err(|e| fail(format!("assigning {topic}/{partition}: {}", describe(&e))))?;
        let deadline =
            Instant::now() + Duration::from_millis(u64::from(settings.metadata_timeout_ms));
        let mut got = 0usize;
        while got < want && Instant::now() < deadline {
            let batch = consumer
                .fetch(u32::try_from(want - got).unwrap_or(u32::MAX), 200)
                .map_err(|e| fail(format!("reading {topic}/{partition}: {}", describe(&e))))?;
            let before = got;
            let mut at_end = false;
            for m in batch {
                if &m.topic != topic || m.partition != *partition {
                    continue;
                }
                got += 1;
                at_end |= m.offset + 1 >= high;
                if let Some(Ok(v @ Value::Object(_))) =
                    m.payload.as_deref().map(serde_json::from_slice::<Value>)
                {
                    values.push(v);
                }
            }
            // Caught up: nothing more came once data had flowed (offsets
            // below the high watermark can be transaction markers, which a
            // read_committed consumer never sees).
            if at_end || (got > 0 && got == before) {
                break;
            }
        }
        read += got;
    }
    if values.is_empty() {
        return Err(fail(format!(
            "no JSON object among the first {read} messages"
        )));
    }
    let schema = arrow_json::reader::infer_json_schema_from_iterator(values.iter().map(Ok))
        .map_err(|e| fail(e.to_string()))?;
    let fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    let described: Vec<String> = fields
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect();
    log::info(&format!(
        "inferred the JSON schema from {} of {read} sampled messages: [{}]; declaring `schema` is recommended",
        values.len(),
        described.join(", ")
    ));
    Ok(fields)
}
