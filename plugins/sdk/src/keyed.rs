//! The [`KeyedStep`] trait: a step with per-key state and event-time
//! timers that the host keeps (and snapshots with every epoch), and its
//! adapter to the `keyed-step-plugin` world.
//!
//! The state is reached through [`KeyedState`], handed to
//! [`KeyedStep::process`] and [`KeyedStep::on_timers`]; values are bytes
//! the plugin encodes as it likes. [`KeyedState::in_memory`] gives the
//! same API without a host, for unit tests of plugin code.

use std::any::Any;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use serde::de::DeserializeOwned;

use crate::__private::keyed_world::exports::fv::plugin::step as wit;
use crate::__private::keyed_world::exports::fv::plugin::timers as wit_timers;
use crate::__private::keyed_world::fv::plugin::types as wit_types;
use crate::step::wit_process_answer;
use crate::{ConfigError, ProcessError, StepOutput, TaskContext, config, ipc};

/// A due timer: the watermark reached `time` (event time, microseconds
/// since the Unix epoch) for `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    /// The key (the host's encoding of the key columns).
    pub key: Vec<u8>,
    /// When it was set for.
    pub time: i64,
}

/// Where the state lives.
enum Backend {
    /// In the host, through the `keyed-state` import.
    Host,
    /// In this process (unit tests of plugin code).
    Memory {
        values: BTreeMap<Vec<u8>, Vec<u8>>,
        timers: BTreeSet<(i64, Vec<u8>)>,
    },
}

/// The per-key state of the task, and the keys of the rows being
/// processed.
pub struct KeyedState {
    backend: Backend,
    keys: Vec<u8>,
    ends: Vec<u32>,
}

impl KeyedState {
    /// State kept in this process, for tests: `row_keys` are the keys of
    /// the rows of the next [`KeyedStep::process`] call.
    pub fn in_memory(row_keys: &[&[u8]]) -> Self {
        let mut state = KeyedState {
            backend: Backend::Memory {
                values: BTreeMap::new(),
                timers: BTreeSet::new(),
            },
            keys: Vec::new(),
            ends: Vec::new(),
        };
        state.set_row_keys(row_keys);
        state
    }

    /// Replace the keys of the rows (in-memory state, for tests).
    pub fn set_row_keys(&mut self, row_keys: &[&[u8]]) {
        self.keys.clear();
        self.ends.clear();
        for key in row_keys {
            self.keys.extend_from_slice(key);
            self.ends.push(self.keys.len() as u32);
        }
    }

    /// Take the timers due at `watermark`, those before it (in-memory
    /// state, for tests: the host does this itself), in firing order.
    pub fn take_due(&mut self, watermark: i64) -> Vec<Timer> {
        let Backend::Memory { timers, .. } = &mut self.backend else {
            return Vec::new();
        };
        let mut due = Vec::new();
        while timers.first().is_some_and(|(t, _)| *t < watermark) {
            if let Some((time, key)) = timers.pop_first() {
                due.push(Timer { key, time });
            }
        }
        due
    }

    fn from_host() -> Self {
        let keys = host::row_keys();
        KeyedState {
            backend: Backend::Host,
            keys: keys.bytes,
            ends: keys.ends,
        }
    }

    /// Number of rows whose keys are known (the rows of the batch being
    /// processed; none in `on_timers`).
    pub fn rows(&self) -> usize {
        self.ends.len()
    }

    /// The key of row `row` of the batch being processed.
    pub fn row_key(&self, row: usize) -> &[u8] {
        let start = if row == 0 {
            0
        } else {
            self.ends[row - 1] as usize
        };
        &self.keys[start..self.ends[row] as usize]
    }

    /// The value kept for `key`.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        match &self.backend {
            Backend::Host => host::get(key),
            Backend::Memory { values, .. } => values.get(key).cloned(),
        }
    }

    /// Keep `value` for `key`. Fails past the stage's `state_limit` (the
    /// host then stops the stage whatever the plugin does).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        match &mut self.backend {
            Backend::Host => host::put(key, value),
            Backend::Memory { values, .. } => {
                values.insert(key.to_vec(), value.to_vec());
                Ok(())
            }
        }
    }

    /// Forget the value of `key`.
    pub fn delete(&mut self, key: &[u8]) {
        match &mut self.backend {
            Backend::Host => host::delete(key),
            Backend::Memory { values, .. } => {
                values.remove(key);
            }
        }
    }

    /// Every key with a value, in byte order (the keys this task owns).
    pub fn keys(&self) -> Vec<Vec<u8>> {
        match &self.backend {
            Backend::Host => {
                let mut all = Vec::new();
                loop {
                    let page = host::scan(all.last().map(|k: &Vec<u8>| k.as_slice()), 1024);
                    let done = page.len() < 1024;
                    all.extend(page);
                    if done {
                        return all;
                    }
                }
            }
            Backend::Memory { values, .. } => values.keys().cloned().collect(),
        }
    }

    /// Call [`KeyedStep::on_timers`] for `key` once the watermark reaches
    /// `time`.
    pub fn set_timer(&mut self, key: &[u8], time: i64) {
        match &mut self.backend {
            Backend::Host => host::set_timer(key, time),
            Backend::Memory { timers, .. } => {
                timers.insert((time, key.to_vec()));
            }
        }
    }

    /// Remove the timer of `key` at `time`, if set.
    pub fn cancel_timer(&mut self, key: &[u8], time: i64) {
        match &mut self.backend {
            Backend::Host => host::cancel_timer(key, time),
            Backend::Memory { timers, .. } => {
                timers.remove(&(time, key.to_vec()));
            }
        }
    }
}

/// The host's `keyed-state` import (absent outside Wasm: unit tests use
/// [`KeyedState::in_memory`]).
#[cfg(target_family = "wasm")]
mod host {
    pub use crate::__private::keyed_world::fv::plugin::keyed_state::{
        cancel_timer, delete, get, put, row_keys, scan, set_timer,
    };
}

#[cfg(not(target_family = "wasm"))]
mod host {
    use crate::__private::keyed_world::fv::plugin::keyed_state::KeyList;

    const NO_HOST: &str = "keyed state outside Wasm: use KeyedState::in_memory in tests";

    pub fn row_keys() -> KeyList {
        KeyList {
            bytes: Vec::new(),
            ends: Vec::new(),
        }
    }
    pub fn get(_: &[u8]) -> Option<Vec<u8>> {
        None
    }
    pub fn put(_: &[u8], _: &[u8]) -> Result<(), String> {
        Err(NO_HOST.into())
    }
    pub fn delete(_: &[u8]) {}
    pub fn scan(_: Option<&[u8]>, _: u32) -> Vec<Vec<u8>> {
        Vec::new()
    }
    pub fn set_timer(_: &[u8], _: i64) {}
    pub fn cancel_timer(_: &[u8], _: i64) {}
}

/// A step that keeps per-key state and timers in the host. The stage
/// names its key columns (`key = [...]`) and routes each row to the task
/// owning its key; [`KeyedState::row_key`] gives each row's key.
pub trait KeyedStep: Sized + 'static {
    /// The plugin's `config` table.
    type Config: DeserializeOwned;

    /// Create the instance for one task from its config and input schema.
    fn open(
        config: Self::Config,
        input: SchemaRef,
        task: &TaskContext,
    ) -> Result<Self, ConfigError>;
    /// The input columns `process` reads; `None` (the default) means all.
    fn input_columns(&self) -> Option<Vec<String>> {
        None
    }
    /// The schema of the rows leaving the step (from `process` and
    /// `on_timers`).
    fn output_schema(&self) -> SchemaRef;
    /// Process one batch. State changes of a call that fails or names bad
    /// rows are undone by the host.
    fn process(
        &mut self,
        batch: RecordBatch,
        state: &mut KeyedState,
    ) -> Result<StepOutput, ProcessError>;
    /// Timers are due (in time order); the rows returned flow downstream.
    fn on_timers(
        &mut self,
        timers: Vec<Timer>,
        state: &mut KeyedState,
    ) -> Result<Option<RecordBatch>, String>;
}

thread_local! {
    /// The task's instance (the host makes one per component instance):
    /// `on-timers` is a free function and finds it here.
    static INSTANCE: RefCell<Option<Rc<dyn Any>>> = const { RefCell::new(None) };
}

/// Adapts a [`KeyedStep`] to the generated WIT exports.
#[doc(hidden)]
pub struct KeyedStepAdapter<T> {
    inner: Rc<RefCell<T>>,
}

impl<T: KeyedStep> wit::GuestStep for KeyedStepAdapter<T> {
    fn open(
        config: String,
        input_schema: Vec<u8>,
        task: wit_types::TaskContext,
    ) -> Result<wit::Step, wit_types::ConfigError> {
        let task = TaskContext::from(task);
        let to_wit = |e: ConfigError| wit_types::ConfigError {
            key: e.key,
            message: e.message,
        };
        let (parsed, schema) =
            config::parse_with_schema::<T::Config>(&config, &input_schema).map_err(to_wit)?;
        let inner = Rc::new(RefCell::new(
            T::open(parsed, schema, &task).map_err(to_wit)?,
        ));
        INSTANCE.with(|i| *i.borrow_mut() = Some(Rc::clone(&inner) as Rc<dyn Any>));
        Ok(wit::Step::new(KeyedStepAdapter { inner }))
    }

    fn input_columns(&self) -> Option<Vec<String>> {
        self.inner.borrow().input_columns()
    }

    fn output_schema(&self) -> Vec<u8> {
        let schema = self.inner.borrow().output_schema();
        ipc::encode_schema(&schema).unwrap_or_default()
    }

    fn process(&self, batch: Vec<u8>) -> Result<wit::StepOutput, wit::ProcessError> {
        let batch = ipc::decode_batch(&batch)
            .map_err(|e| wit::ProcessError::Failed(format!("decoding the input batch: {e}")))?;
        let mut state = KeyedState::from_host();
        wit_process_answer!(wit, self.inner.borrow_mut().process(batch, &mut state))
    }
}

/// The `timers` export of a [`KeyedStep`] component.
#[doc(hidden)]
pub struct KeyedTimersAdapter<T>(std::marker::PhantomData<T>);

impl<T: KeyedStep> wit_timers::Guest for KeyedTimersAdapter<T> {
    fn on_timers(
        keys: Vec<u8>,
        ends: Vec<u32>,
        times: Vec<i64>,
    ) -> Result<Option<Vec<u8>>, String> {
        let instance = INSTANCE
            .with(|i| i.borrow().clone())
            .and_then(|i| i.downcast::<RefCell<T>>().ok())
            .ok_or_else(|| "on-timers before open".to_string())?;
        let mut timers = Vec::with_capacity(times.len());
        let mut start = 0usize;
        for (end, time) in ends.iter().zip(times) {
            let end = *end as usize;
            let key = keys
                .get(start..end)
                .ok_or_else(|| format!("timer key bytes {start}..{end} out of range"))?;
            timers.push(Timer {
                key: key.to_vec(),
                time,
            });
            start = end;
        }
        let mut state = KeyedState {
            backend: Backend::Host,
            keys: Vec::new(),
            ends: Vec::new(),
        };
        let rows = instance.borrow_mut().on_timers(timers, &mut state)?;
        rows.map(|batch| {
            ipc::encode_batch(&batch).map_err(|e| format!("encoding the timers' output: {e}"))
        })
        .transpose()
    }
}
