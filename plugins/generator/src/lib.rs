//! `generator`: deterministic, seeded event streams.
//!
//! - `kind = "nexmark"`: the Nexmark benchmark's person / auction / bid
//!   events, following the distributions of the reference Nexmark generator
//!   (1 person : 3 auctions : 46 bids per 50 events, hot sellers, hot
//!   auctions and hot bidders at a 100:1 ratio, prices `10^(6u) * 100`).
//!   `stream` picks which event type this source emits; two generator sources
//!   with the same seed see the same global event sequence, so persons and
//!   auctions join the way they do in Nexmark.
//! - `kind = "sequence"`: `seq` 0, 1, 2, … with a timestamp.
//!
//! Every event is a pure function of `(seed, event number)`, so the
//! position of a split is simply the next event number and a restart
//! resumes exactly. Event times advance by `1 s / first_event_rate` per
//! event from `base_time`, independent of the wall clock.

mod nexmark;
mod rng;

use std::sync::Arc;
use std::time::Instant;

use fv_plugin_sdk::arrow_array::RecordBatch;
use fv_plugin_sdk::arrow_schema::SchemaRef;
use fv_plugin_sdk::{ConfigError, Poll, Scan, Source, SplitPosition, TaskContext};

/// The generator's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `nexmark` (default) or `sequence`.
    #[serde(default = "default_kind")]
    pub kind: String,
    /// For `nexmark`: `bid` (default), `auction` or `person`.
    #[serde(default = "default_stream")]
    pub stream: String,
    /// Total number of events in the global sequence; absent = unbounded.
    pub events: Option<u64>,
    /// Events per second of wall-clock time; 0 (default) = as fast as possible.
    #[serde(default)]
    pub rate: u64,
    /// Seed of every random choice.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Event time of event 0, in milliseconds since the Unix epoch
    /// (default 2024-01-01T00:00:00Z).
    #[serde(default = "default_base_time")]
    pub base_time: i64,
    /// Events per second of *event time* (default 10 000, as in Nexmark).
    #[serde(default = "default_event_rate")]
    pub first_event_rate: u64,
}

fn default_kind() -> String {
    "nexmark".into()
}
fn default_stream() -> String {
    "bid".into()
}
fn default_seed() -> u64 {
    42
}
fn default_base_time() -> i64 {
    1_704_067_200_000
}
fn default_event_rate() -> u64 {
    10_000
}

/// Which rows the generator emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Nexmark persons.
    Person,
    /// Nexmark auctions.
    Auction,
    /// Nexmark bids.
    Bid,
    /// A plain sequence.
    Sequence,
}

/// One generator task. It owns the events `n` with `n % parallelism == task`.
pub struct Generator {
    stream: Stream,
    params: nexmark::Params,
    events: Option<u64>,
    rate: u64,
    task: u64,
    parallelism: u64,
    split: String,
    /// The next global event number this task will look at.
    next_event: u64,
    started: Option<Instant>,
    emitted_since_start: u64,
    /// Every column of the stream.
    full_schema: SchemaRef,
    /// Per field of `full_schema`: whether batches carry it.
    keep: Vec<bool>,
    /// What batches carry (`full_schema` until a projection).
    schema: SchemaRef,
}

impl Source for Generator {
    type Config = Config;

    fn open(config: Config, task: &TaskContext) -> Result<Self, ConfigError> {
        let stream = match (config.kind.as_str(), config.stream.as_str()) {
            ("nexmark", "bid") => Stream::Bid,
            ("nexmark", "auction") => Stream::Auction,
            ("nexmark", "person") => Stream::Person,
            ("nexmark", other) => {
                return Err(ConfigError::at(
                    "stream",
                    format!(
                        "unknown Nexmark stream `{other}`; expected `bid`, `auction` or `person`"
                    ),
                ));
            }
            ("sequence", _) => Stream::Sequence,
            (other, _) => {
                return Err(ConfigError::at(
                    "kind",
                    format!("unknown kind `{other}`; expected `nexmark` or `sequence`"),
                ));
            }
        };
        if config.first_event_rate == 0 {
            return Err(ConfigError::at(
                "first_event_rate",
                "must be at least 1 event per second",
            ));
        }
        let parallelism = u64::from(task.parallelism.max(1));
        let task_index = u64::from(task.task_index);
        let schema = nexmark::schema(stream);
        Ok(Generator {
            stream,
            params: nexmark::Params {
                seed: config.seed,
                base_time: config.base_time,
                inter_event_delay_us: 1_000_000.0 / config.first_event_rate as f64,
            },
            events: config.events,
            rate: config.rate,
            task: task_index,
            parallelism,
            split: format!("generator-{task_index}-of-{parallelism}"),
            next_event: task_index,
            started: None,
            emitted_since_start: 0,
            keep: vec![true; schema.fields().len()],
            full_schema: Arc::clone(&schema),
            schema,
        })
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn push_down(&mut self, scan: Scan) -> Result<(), String> {
        for column in scan.columns.iter().flatten() {
            if self.full_schema.field_with_name(column).is_err() {
                return Err(format!(
                    "asked for column `{column}`, which the {:?} stream does not have ({})",
                    self.stream, self.full_schema
                ));
            }
        }
        self.keep = self
            .full_schema
            .fields()
            .iter()
            .map(|f| scan.reads(f.name()))
            .collect();
        let indices: Vec<usize> = (0..self.keep.len()).filter(|i| self.keep[*i]).collect();
        self.schema = Arc::new(
            self.full_schema
                .project(&indices)
                .map_err(|e| e.to_string())?,
        );
        Ok(())
    }

    fn splits(&self) -> Vec<String> {
        vec![self.split.clone()]
    }

    fn restore(&mut self, positions: Vec<SplitPosition>) -> Result<(), String> {
        for p in positions {
            if p.split != self.split {
                return Err(format!(
                    "position for unknown split `{}` (this task owns `{}`)",
                    p.split, self.split
                ));
            }
            let bytes: [u8; 8] = p.position.as_slice().try_into().map_err(|_| {
                format!(
                    "position of `{}` is {} bytes, expected 8",
                    p.split,
                    p.position.len()
                )
            })?;
            let next = u64::from_le_bytes(bytes);
            if next % self.parallelism != self.task {
                return Err(format!(
                    "position {next} does not belong to task {} of {}",
                    self.task, self.parallelism
                ));
            }
            self.next_event = next;
        }
        Ok(())
    }

    fn committed(&mut self, epoch: u64, positions: Vec<SplitPosition>) -> Result<(), String> {
        // A generator has nothing upstream to acknowledge; it reports the
        // committed progress so that operators (and tests) can see it.
        for p in positions {
            let next = <[u8; 8]>::try_from(p.position.as_slice())
                .map(u64::from_le_bytes)
                .unwrap_or_default();
            fv_plugin_sdk::log::debug(&format!(
                "epoch {epoch} committed: split {} continues at event {next}",
                p.split
            ));
        }
        Ok(())
    }

    fn poll(&mut self, max_rows: usize) -> Result<Poll, String> {
        let limit = self.events.unwrap_or(u64::MAX);
        if self.next_event >= limit {
            return Ok(Poll::Finished);
        }
        let mut budget = max_rows.max(1) as u64;
        if self.rate > 0 {
            // Pace by wall-clock time: never run ahead of `rate` events/s.
            let started = *self.started.get_or_insert_with(Instant::now);
            let allowed =
                (started.elapsed().as_secs_f64() * self.rate as f64) as u64 / self.parallelism;
            let ahead = allowed.saturating_sub(self.emitted_since_start);
            if ahead == 0 {
                return Ok(Poll::Idle);
            }
            budget = budget.min(ahead);
        }
        let mut builder = nexmark::BatchBuilder::new(self.stream, budget as usize, &self.keep);
        let mut event = self.next_event;
        let mut rows = 0u64;
        // Scan events of this task until `budget` rows of our stream are made;
        // events of the other streams are skipped but still advance time.
        while event < limit && rows < budget {
            if builder.push(&self.params, event) {
                rows += 1;
            }
            event += self.parallelism;
        }
        self.next_event = event;
        self.emitted_since_start += rows;
        let batch: RecordBatch = builder
            .finish(&self.full_schema, &self.schema)
            .map_err(|e| e.to_string())?;
        let positions = vec![SplitPosition {
            split: self.split.clone(),
            position: event.to_le_bytes().to_vec(),
        }];
        if batch.num_rows() == 0 && event >= limit {
            return Ok(Poll::Finished);
        }
        Ok(Poll::Batch {
            batch,
            positions,
            rejected: Vec::new(),
        })
    }
}

fv_plugin_sdk::export_source!(
    Generator,
    capabilities = "",
    config_schema = include_str!("../config.schema.json"),
);
