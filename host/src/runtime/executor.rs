//! Runs a [`Plan`]: one thread per task, bounded channels on every edge,
//! graceful stop, and the first failure as the run's error.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender, bounded};

use super::control::RunControl;
use super::message::Message;
use super::metrics::StageMetrics;
use super::operator::{Downstream, Emitter, Operator, TaskError};
use super::operators::{SinkWriter, SqlStage, WasmStep};
use super::plan::{Plan, StageTask};
use crate::plugin::{SourceInstance, SourcePoll};

/// How often an idle task wakes for timers, and an idle source re-polls.
const TICK: Duration = Duration::from_millis(50);
const IDLE_BACKOFF: Duration = Duration::from_millis(10);

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A task failed; the message names the stage, plugin and reason.
    #[error("{0}")]
    Task(String),
    /// A thread could not be started.
    #[error("cannot start a task thread: {0}")]
    Spawn(String),
}

/// What a finished run did.
#[derive(Debug)]
pub struct RunReport {
    /// Counters per source, stage and sink, in topology order.
    pub stages: Vec<Arc<StageMetrics>>,
    /// Wall-clock duration.
    pub elapsed: Duration,
    /// Whether it ended because a stop was requested.
    pub stopped: bool,
}

/// The edges of the graph: per producer task, its downstream senders; per
/// consumer task, its input receivers.
struct Wiring {
    outputs: BTreeMap<(String, usize), Vec<Downstream>>,
    inputs: BTreeMap<(String, usize), Vec<Receiver<Message>>>,
}

/// Run `plan` until its sources drain, a stop is requested, or a task fails.
pub fn run(
    plan: Plan,
    control: Arc<RunControl>,
    metrics: &[Arc<StageMetrics>],
) -> Result<RunReport, RunError> {
    let started = Instant::now();
    let capacity = plan.topology.settings.channel_capacity;
    let batch_size = plan.topology.settings.batch_size;
    let interval = plan.topology.settings.commit_interval;
    let metric = |name: &str| {
        metrics
            .iter()
            .find(|m| m.name == name)
            .map(Arc::clone)
            .unwrap_or_default()
    };

    // Parallelism of every producer, and the consumers of each.
    let mut parallelism: BTreeMap<String, usize> = BTreeMap::new();
    for s in &plan.sources {
        parallelism.insert(s.name.clone(), s.tasks.len());
    }
    for s in &plan.stages {
        parallelism.insert(s.name.clone(), s.tasks.len());
    }
    let mut consumers: Vec<(String, Vec<String>, usize)> = Vec::new();
    for s in &plan.stages {
        consumers.push((s.name.clone(), s.inputs.clone(), s.tasks.len()));
    }
    for s in &plan.sinks {
        consumers.push((s.name.clone(), s.inputs.clone(), s.tasks.len()));
    }
    let mut wiring = Wiring {
        outputs: BTreeMap::new(),
        inputs: BTreeMap::new(),
    };
    for (consumer, inputs, tasks) in &consumers {
        for input in inputs {
            let producers = parallelism.get(input).copied().unwrap_or(0);
            for p in 0..producers {
                let mut senders = Vec::with_capacity(*tasks);
                for c in 0..*tasks {
                    let (tx, rx) = bounded(capacity);
                    senders.push(tx);
                    wiring
                        .inputs
                        .entry((consumer.clone(), c))
                        .or_default()
                        .push(rx);
                }
                wiring
                    .outputs
                    .entry((input.clone(), p))
                    .or_default()
                    .push(Downstream::new(senders));
            }
        }
    }
    let dead_letter: Option<(Sender<Message>, Receiver<Message>)> = plan
        .topology
        .dead_letter
        .as_ref()
        .map(|_| bounded(capacity));
    if let (Some(name), Some((_, rx))) = (&plan.topology.dead_letter, &dead_letter) {
        wiring
            .inputs
            .entry((name.clone(), 0))
            .or_default()
            .push(rx.clone());
    }
    let dlq_sender = dead_letter.as_ref().map(|(tx, _)| tx.clone());
    drop(dead_letter);

    let mut handles: Vec<(String, JoinHandle<()>)> = Vec::new();
    let spawn =
        |name: String, f: Box<dyn FnOnce() + Send>| -> Result<(String, JoinHandle<()>), RunError> {
            let handle = std::thread::Builder::new()
                .name(format!("fv-{name}"))
                .spawn(f)
                .map_err(|e| RunError::Spawn(e.to_string()))?;
            Ok((name, handle))
        };

    for source in plan.sources {
        let m = metric(&source.name);
        for (i, instance) in source.tasks.into_iter().enumerate() {
            let emitter = Emitter::new(
                wiring
                    .outputs
                    .remove(&(source.name.clone(), i))
                    .unwrap_or_default(),
                None,
                Arc::clone(&m),
            );
            let control = Arc::clone(&control);
            let label = format!("{}[{i}]", source.name);
            handles.push(spawn(
                label,
                Box::new(move || source_task(instance, emitter, batch_size, &control)),
            )?);
        }
    }
    for stage in plan.stages {
        let m = metric(&stage.name);
        for (i, task) in stage.tasks.into_iter().enumerate() {
            let emitter = Emitter::new(
                wiring
                    .outputs
                    .remove(&(stage.name.clone(), i))
                    .unwrap_or_default(),
                dlq_sender.clone(),
                Arc::clone(&m),
            );
            let inputs = wiring
                .inputs
                .remove(&(stage.name.clone(), i))
                .unwrap_or_default();
            let op: Box<dyn Operator> = match task {
                StageTask::Sql(q) => Box::new(SqlStage::new(&stage.name, q)),
                StageTask::Step(s) => Box::new(WasmStep::new(&stage.name, *s)),
            };
            let control = Arc::clone(&control);
            let label = format!("{}[{i}]", stage.name);
            handles.push(spawn(
                label,
                Box::new(move || operator_task(op, inputs, emitter, &control)),
            )?);
        }
    }
    drop(dlq_sender);
    for sink in plan.sinks {
        let m = metric(&sink.name);
        for (i, instance) in sink.tasks.into_iter().enumerate() {
            let emitter = Emitter::new(Vec::new(), None, Arc::clone(&m));
            let inputs = wiring
                .inputs
                .remove(&(sink.name.clone(), i))
                .unwrap_or_default();
            let op: Box<dyn Operator> = Box::new(SinkWriter::new(instance, interval));
            let control = Arc::clone(&control);
            let label = format!("{}[{i}]", sink.name);
            handles.push(spawn(
                label,
                Box::new(move || operator_task(op, inputs, emitter, &control)),
            )?);
        }
    }
    for (name, handle) in handles {
        if handle.join().is_err() {
            control.fail(format!(
                "task {name} panicked (a bug in fvhost; please report it)"
            ));
        }
    }
    let report = RunReport {
        stages: metrics.to_vec(),
        elapsed: started.elapsed(),
        stopped: control.stop_requested(),
    };
    match control.failure() {
        Some(message) => Err(RunError::Task(message)),
        None => Ok(report),
    }
}

fn source_task(
    mut instance: SourceInstance,
    mut out: Emitter,
    batch_size: u32,
    control: &RunControl,
) {
    let result = (|| -> Result<(), TaskError> {
        while !control.should_stop() {
            match instance.poll(batch_size)? {
                SourcePoll::Batch(batch, _positions) => {
                    StageMetrics::add(&out.metrics.batches_in, 1);
                    StageMetrics::add(&out.metrics.rows_in, batch.num_rows() as u64);
                    out.emit(batch)?;
                }
                SourcePoll::Idle => std::thread::sleep(IDLE_BACKOFF),
                SourcePoll::Finished => break,
            }
        }
        Ok(())
    })();
    finish(result, control);
    out.end_of_stream();
}

fn operator_task(
    mut op: Box<dyn Operator>,
    inputs: Vec<Receiver<Message>>,
    mut out: Emitter,
    control: &RunControl,
) {
    let result = (|| -> Result<(), TaskError> {
        let mut open: Vec<bool> = vec![true; inputs.len()];
        let mut remaining = inputs.len();
        while remaining > 0 {
            let mut select = Select::new();
            let mut index = Vec::with_capacity(remaining);
            for (i, rx) in inputs.iter().enumerate() {
                if open[i] {
                    select.recv(rx);
                    index.push(i);
                }
            }
            let ready = match select.select_timeout(TICK) {
                Ok(op) => op,
                Err(_) => {
                    op.on_tick(&mut out)?;
                    continue;
                }
            };
            let i = index[ready.index()];
            match ready.recv(&inputs[i]) {
                Ok(Message::Batch(batch)) => {
                    StageMetrics::add(&out.metrics.batches_in, 1);
                    StageMetrics::add(&out.metrics.rows_in, batch.num_rows() as u64);
                    op.on_batch(batch, &mut out)?;
                }
                // A closed channel is an upstream that ended (or failed:
                // the failure is in `control` and decides below).
                Ok(Message::EndOfStream) | Err(_) => {
                    open[i] = false;
                    remaining -= 1;
                }
            }
        }
        if control.has_failed() {
            op.on_abort();
            return Ok(());
        }
        op.on_end_of_stream(&mut out)
    })();
    if result.is_err() {
        op.on_abort();
    }
    finish(result, control);
    out.end_of_stream();
}

fn finish(result: Result<(), TaskError>, control: &RunControl) {
    match result {
        Ok(()) | Err(TaskError::DownstreamClosed) => {}
        Err(e) => {
            tracing::error!("{e}");
            control.fail(e.to_string());
        }
    }
}
