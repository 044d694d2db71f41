//! The [`Sink`] trait and its adapter to the `fv:plugin/sink` interface.

use std::cell::RefCell;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use serde::de::DeserializeOwned;

use crate::__private::sink_world::exports::fv::plugin::sink as wit;
use crate::__private::sink_world::fv::plugin::types as wit_types;
use crate::{ConfigError, TaskContext, config, ipc};

/// A sink plugin: writes batches and takes part in the two-phase commit of
/// each epoch (`write`… → `prepare(N)` → `commit(N)`, or `abort(N)`).
pub trait Sink: Sized + 'static {
    /// The plugin's `config` table.
    type Config: DeserializeOwned;

    /// Create the instance for one task.
    fn open(
        config: Self::Config,
        input: SchemaRef,
        task: &TaskContext,
    ) -> Result<Self, ConfigError>;
    /// The input columns [`write`](Self::write) reads, in the order it
    /// wants them; `None` (the default) means all. The host sends only
    /// these, and sources upstream read no more than the topology needs:
    /// a sink that only counts rows returns `Some(vec![])`.
    fn input_columns(&self) -> Option<Vec<String>> {
        None
    }
    /// Write a batch of the current epoch.
    fn write(&mut self, batch: RecordBatch) -> Result<(), String>;
    /// Pre-commit the epoch; the handle is stored by the host and given back to `commit`.
    fn prepare(&mut self, epoch: u64) -> Result<Vec<u8>, String>;
    /// Make the epoch visible. Must be idempotent: it is replayed after a crash.
    fn commit(&mut self, epoch: u64, handle: Vec<u8>) -> Result<(), String>;
    /// Discard the epoch.
    fn abort(&mut self, epoch: u64) -> Result<(), String>;
}

/// Adapts a [`Sink`] to the generated WIT resource.
#[doc(hidden)]
pub struct SinkAdapter<T> {
    inner: RefCell<T>,
}

impl<T: Sink> wit::GuestSink for SinkAdapter<T> {
    fn open(
        config: String,
        input_schema: Vec<u8>,
        task: wit_types::TaskContext,
    ) -> Result<wit::Sink, wit_types::ConfigError> {
        let task = TaskContext::from(task);
        let (parsed, schema) =
            config::parse_with_schema::<T::Config>(&config, &input_schema).map_err(to_wit)?;
        let inner = T::open(parsed, schema, &task).map_err(to_wit)?;
        Ok(wit::Sink::new(SinkAdapter {
            inner: RefCell::new(inner),
        }))
    }

    fn input_columns(&self) -> Option<Vec<String>> {
        self.inner.borrow().input_columns()
    }

    fn write(&self, batch: Vec<u8>) -> Result<(), String> {
        let batch = ipc::decode_batch(&batch).map_err(|e| format!("decoding a batch: {e}"))?;
        self.inner.borrow_mut().write(batch)
    }

    fn prepare(&self, epoch: u64) -> Result<Vec<u8>, String> {
        self.inner.borrow_mut().prepare(epoch)
    }

    fn commit(&self, epoch: u64, handle: Vec<u8>) -> Result<(), String> {
        self.inner.borrow_mut().commit(epoch, handle)
    }

    fn abort(&self, epoch: u64) -> Result<(), String> {
        self.inner.borrow_mut().abort(epoch)
    }
}

fn to_wit(e: ConfigError) -> wit_types::ConfigError {
    wit_types::ConfigError {
        key: e.key,
        message: e.message,
    }
}
