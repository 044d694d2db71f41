//! [`StateContext`]: what a stateful task needs to take part in epochs —
//! its vnode range, the state restored for it, and the hand-off of its
//! snapshot to the epoch store at a barrier.
//!
//! The hand-off is asynchronous: the task encodes its state (the only part
//! that stops its data) and goes on; the write happens on the epoch store's
//! I/O thread, which acknowledges the epoch to the coordinator once the
//! object is durable. A task with `state_memory` spools its snapshot to a
//! local file as it is encoded, and the store uploads the file in parts:
//! its state is never whole in memory, not even encoded. It never decides
//! what the state is: operators do.

use std::path::PathBuf;
use std::sync::Arc;

use crossbeam_channel::Sender;

use super::RunControl;
use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::Schema;

use super::operator::TaskError;
use super::operators::rows::{saved_watermark, with_watermark};
use crate::epoch::{Ack, EpochStore};
use crate::state::{
    KeyedState, SavedObject, SnapshotKind, SnapshotWriter, SpooledSnapshot, StateError,
    StateObject, StateSnapshot, StateTable, ValueCodec, VnodeRange, WriterWatermarks,
};

/// A task's state as a checkpoint takes it, a chunk at a time: a native
/// operator's [`StateTable`], or a keyed step's [`KeyedState`] with the
/// watermark its operator reached.
pub trait Checkpointed {
    /// The snapshot's columns for `kind` (without the watermark).
    fn snapshot_schema(&self, kind: SnapshotKind) -> Schema;
    /// The watermark the state was taken at.
    fn watermark(&self) -> Option<i64>;
    /// The next snapshot must be whole whatever the chain says.
    fn needs_full(&self) -> bool;
    /// Entries changed since the last saved snapshot.
    fn changed(&self) -> usize;
    /// Entries held.
    fn len(&self) -> usize;
    /// Whether no entry is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The snapshot of `kind`, at most about `chunk` entries a call of `f`.
    fn snapshot_chunks(
        &self,
        kind: SnapshotKind,
        chunk: usize,
        f: &mut dyn FnMut(Vec<ArrayRef>) -> Result<(), StateError>,
    ) -> Result<(), StateError>;
    /// The snapshot just taken is saved.
    fn mark_saved(&mut self);
    /// Entries on local disk, written there and read back (state_memory).
    fn spilled(&self) -> (usize, u64, u64);
}

impl<C: ValueCodec> Checkpointed for StateTable<C> {
    fn snapshot_schema(&self, kind: SnapshotKind) -> Schema {
        StateTable::snapshot_schema(self, kind)
    }
    fn watermark(&self) -> Option<i64> {
        StateTable::watermark(self)
    }
    fn needs_full(&self) -> bool {
        StateTable::needs_full(self)
    }
    fn changed(&self) -> usize {
        StateTable::changed(self)
    }
    fn len(&self) -> usize {
        StateTable::len(self)
    }
    fn snapshot_chunks(
        &self,
        kind: SnapshotKind,
        chunk: usize,
        f: &mut dyn FnMut(Vec<ArrayRef>) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        StateTable::snapshot_chunks(self, kind, chunk, f)
    }
    fn mark_saved(&mut self) {
        StateTable::mark_saved(self)
    }
    fn spilled(&self) -> (usize, u64, u64) {
        StateTable::spilled(self)
    }
}

/// A keyed step's state and the watermark its operator reached.
pub struct KeyedCheckpoint<'a>(pub &'a mut KeyedState, pub Option<i64>);

impl Checkpointed for KeyedCheckpoint<'_> {
    fn snapshot_schema(&self, kind: SnapshotKind) -> Schema {
        KeyedState::snapshot_schema(kind)
    }
    fn watermark(&self) -> Option<i64> {
        self.1
    }
    fn needs_full(&self) -> bool {
        self.0.needs_full()
    }
    fn changed(&self) -> usize {
        self.0.changed()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn snapshot_chunks(
        &self,
        kind: SnapshotKind,
        chunk: usize,
        f: &mut dyn FnMut(Vec<ArrayRef>) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        self.0.snapshot_chunks(kind, chunk, f)
    }
    fn mark_saved(&mut self) {
        self.0.mark_saved()
    }
    fn spilled(&self) -> (usize, u64, u64) {
        self.0.spilled()
    }
}

/// A task's encoded state of one epoch, where it waits to be stored.
enum Encoded {
    /// In memory.
    Bytes(StateSnapshot),
    /// In a local file (`state_memory`).
    File(SpooledSnapshot),
}

/// Entries a snapshot batch holds at most: a snapshot is encoded a batch
/// at a time, never converted to columns whole.
const SNAPSHOT_CHUNK: usize = 64 * 1024;

/// The fault hook of a task's local disk: `spill-write:<n>` fails a write
/// in the task's n-th checkpoint interval.
fn spill_fault() -> crate::state::FaultHook {
    Box::new(|round| {
        crate::epoch::fault_point("spill-write", u64::from(round)).map_err(|e| e.to_string())
    })
}

/// One stateful task's link to the epoch store.
pub struct StateContext {
    /// The stage.
    pub stage: String,
    /// The task's index.
    pub task: u32,
    /// The vnodes this task owns.
    pub vnodes: VnodeRange,
    /// State objects of the restored epoch whose vnodes overlap this task's
    /// (checksums verified); rows outside `vnodes` belong to other tasks.
    pub restored: Vec<SavedObject>,
    /// The objects this task's state is made of since its last full
    /// snapshot: that snapshot, then one delta per epoch.
    chain: Vec<StateObject>,
    /// Epochs per chain: a full snapshot every this many.
    full_every: usize,
    /// Bytes of state the task keeps in memory, and the directory whose
    /// subdirectory takes the rest (`state_memory`).
    memory_budget: Option<(PathBuf, usize)>,
    /// With a budget: the start of the names of the files this task's
    /// snapshots are spooled to (`<spill>/<stage>-<task>-<pid>-<n>`).
    spool: Option<PathBuf>,
    store: EpochStore,
    acks: Sender<Ack>,
    control: Arc<RunControl>,
}

/// The most deltas a budgeted task's chain holds (see
/// [`StateContext::next_kind`]).
pub const MAX_BUDGETED_DELTAS: usize = 256;

impl StateContext {
    /// A context for task `task` of `parallelism` of `stage`.
    pub fn new(
        stage: &str,
        task: u32,
        parallelism: usize,
        restored: &[SavedObject],
        store: EpochStore,
        acks: Sender<Ack>,
        control: Arc<RunControl>,
    ) -> Self {
        let vnodes = VnodeRange::of_task(task as usize, parallelism);
        // Only the objects this task needs (their bytes shared, not
        // copied); in epoch order, so each delta lands on the state before it.
        let mut restored: Vec<SavedObject> = restored
            .iter()
            .filter(|(o, _)| o.vnodes.overlaps(&vnodes))
            .cloned()
            .collect();
        restored.sort_by_key(|(o, _)| o.epoch);
        StateContext {
            stage: stage.to_string(),
            task,
            vnodes,
            restored,
            chain: Vec::new(),
            full_every: 1,
            memory_budget: None,
            spool: None,
            store,
            acks,
            control,
        }
    }

    /// Write a full snapshot every `epochs` epochs and only the changes
    /// in between (1: always full).
    pub fn with_full_every(mut self, epochs: usize) -> Self {
        self.full_every = epochs.max(1);
        self
    }

    /// Keep about `bytes` of the task's state in memory and the rest in a
    /// directory of its own under `dir` (see
    /// [`StateTable::with_memory_budget`]).
    pub fn with_memory_budget(mut self, budget: Option<(PathBuf, usize)>) -> Self {
        self.memory_budget = budget;
        self
    }

    /// A failure of this task's stage.
    pub fn error(&self, message: impl std::fmt::Display) -> TaskError {
        TaskError::State {
            stage: self.stage.clone(),
            message: message.to_string(),
        }
    }

    /// A failure of Arrow while this task's stage was doing `action`.
    pub fn arrow(
        &self,
        action: &'static str,
    ) -> impl Fn(arrow::error::ArrowError) -> TaskError + '_ {
        move |source| TaskError::Arrow {
            stage: self.stage.clone(),
            action,
            source,
        }
    }

    /// A failure of this task's state table.
    pub fn state_error(&self, source: StateError) -> TaskError {
        TaskError::StateTable {
            stage: self.stage.clone(),
            source,
        }
    }

    /// An empty table for this task's vnodes, filled with the state
    /// restored for them (and the watermark it was saved at).
    pub fn restore_table<C: ValueCodec>(
        &mut self,
        codec: C,
        scope_column: Option<&'static str>,
    ) -> Result<StateTable<C>, TaskError> {
        let mut table = StateTable::new(codec, scope_column, self.vnodes);
        if let Some((mine, bytes, label)) = self.spill_place() {
            table = table
                .budgeted(&mine, bytes, label)
                .map_err(|e| self.state_error(e))?
                .with_spill_fault(spill_fault());
        }
        // A restore holds the table, one object's bytes and one decoded
        // batch, not every object decoded at once.
        let stage = self.stage.clone();
        let writers = self.restore_each(|batch, vnodes| {
            table
                .restore(batch, vnodes)
                .map_err(|source| TaskError::StateTable {
                    stage: stage.clone(),
                    source,
                })
        })?;
        table.restore_watermarks(writers);
        Ok(table)
    }

    /// With `state_memory`: a directory for this task's cold state that no
    /// other task or run uses (its own name, this process and a sequence
    /// number; its snapshots are spooled beside it), the budget, and the
    /// label its log lines and errors take.
    fn spill_place(&mut self) -> Option<(PathBuf, usize, String)> {
        let (dir, bytes) = self.memory_budget.as_ref()?;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mine = dir.join(format!(
            "{}-{}-{}-{n}",
            self.stage,
            self.task,
            std::process::id()
        ));
        self.spool = Some(mine.clone());
        let label = format!("stage `{}` task {}", self.stage, self.task);
        Some((mine, *bytes, label))
    }

    /// Give a keyed step's (empty) state this task's memory budget, if
    /// it has one: its values past it go to local disk.
    pub fn budget_keyed(&mut self, state: &mut KeyedState) -> Result<(), TaskError> {
        if let Some((mine, bytes, label)) = self.spill_place() {
            state
                .spill_to(&mine, bytes, label, Some(spill_fault()))
                .map_err(|e| self.state_error(e))?;
        }
        Ok(())
    }

    /// Encode all of `table` as this task's state of `epoch`.
    pub fn snapshot<C: ValueCodec>(
        &self,
        epoch: u64,
        table: &StateTable<C>,
    ) -> Result<StateSnapshot, TaskError> {
        self.snapshot_as(epoch, table, SnapshotKind::Full)
    }

    /// Encode `table` as a snapshot of `kind`, [`SNAPSHOT_CHUNK`] entries
    /// a batch.
    fn snapshot_as(
        &self,
        epoch: u64,
        table: &impl Checkpointed,
        kind: SnapshotKind,
    ) -> Result<StateSnapshot, TaskError> {
        let schema = with_watermark(table.snapshot_schema(kind), table.watermark());
        let key = format!("{} epoch {epoch}", self.stage);
        let mut writer = SnapshotWriter::new(&key, &schema).map_err(|e| self.snapshot_error(e))?;
        self.encode_into(table, kind, &schema, &mut writer)?;
        writer.finish().map_err(|e| self.snapshot_error(e))
    }

    /// [`StateContext::snapshot_as`] into the local file `path`.
    fn snapshot_spooled(
        &self,
        epoch: u64,
        table: &impl Checkpointed,
        kind: SnapshotKind,
        path: PathBuf,
    ) -> Result<SpooledSnapshot, TaskError> {
        let schema = with_watermark(table.snapshot_schema(kind), table.watermark());
        let key = format!("{} epoch {epoch}", self.stage);
        let mut writer =
            SnapshotWriter::spooled(&key, &schema, path).map_err(|e| self.snapshot_error(e))?;
        self.encode_into(table, kind, &schema, &mut writer)?;
        writer.finish().map_err(|e| self.snapshot_error(e))
    }

    /// Write `table`'s snapshot of `kind` to `writer`, a batch of
    /// [`SNAPSHOT_CHUNK`] entries at a time.
    fn encode_into<W: std::io::Write>(
        &self,
        table: &impl Checkpointed,
        kind: SnapshotKind,
        schema: &arrow::datatypes::SchemaRef,
        writer: &mut SnapshotWriter<W>,
    ) -> Result<(), TaskError> {
        table
            .snapshot_chunks(kind, SNAPSHOT_CHUNK, &mut |columns| {
                let batch = RecordBatch::try_new(Arc::clone(schema), columns)?;
                writer.write(&batch).map_err(StateError::from)
            })
            .map_err(|e| self.state_error(e))
    }

    fn snapshot_error(&self, source: crate::state::SnapshotError) -> TaskError {
        TaskError::Snapshot {
            stage: self.stage.clone(),
            source,
        }
    }

    /// Snapshot `table` as the state of `epoch` — whole at the start of a
    /// chain, else only what changed since the previous epoch — and hand
    /// it off.
    pub fn checkpoint(
        &mut self,
        epoch: u64,
        format: &str,
        table: &mut impl Checkpointed,
    ) -> Result<(), TaskError> {
        let kind = match table.needs_full() {
            true => SnapshotKind::Full,
            false => self.next_kind(table.changed(), table.len()),
        };
        let snapshot = match &self.spool {
            Some(spool) => {
                let mut name = spool.as_os_str().to_owned();
                name.push(format!("-epoch-{epoch}.arrow"));
                Encoded::File(self.snapshot_spooled(epoch, table, kind, name.into())?)
            }
            None => Encoded::Bytes(self.snapshot_as(epoch, table, kind)?),
        };
        table.mark_saved();
        let (on_disk, written, read) = table.spilled();
        if on_disk > 0 {
            let (stage, task, total) = (&self.stage, self.task, table.len());
            tracing::debug!(stage = %stage, task, epoch, entries = total, on_disk, written, read, "state on local disk");
        }
        self.send(epoch, format, snapshot, kind);
        Ok(())
    }

    /// What the next snapshot must be: whole at the start of a chain,
    /// every `checkpoint.full_every` epochs, and when `changed` of the
    /// `entries` held are half of them or more (such a delta costs what the
    /// whole does to write, and a restore would read both); else only what
    /// changed.
    ///
    /// A task with `state_memory` ends its chain by size instead: when its
    /// deltas add up to as many bytes as its last whole snapshot (a
    /// restart reads at most twice its state). A whole snapshot of state
    /// larger than memory reads every entry back from disk: every
    /// `full_every` epochs, it was most of the task's time. A chain of
    /// [`MAX_BUDGETED_DELTAS`] ends too, so an idle task's manifest entry
    /// (a line per object) stays bounded.
    pub fn next_kind(&self, changed: usize, entries: usize) -> SnapshotKind {
        let chain_ends = match (self.chain.split_first(), &self.memory_budget) {
            (None, _) => true,
            (Some((whole, deltas)), Some(_)) => {
                deltas.len() >= MAX_BUDGETED_DELTAS
                    || deltas.iter().map(|d| d.bytes).sum::<u64>() >= whole.bytes
            }
            (Some(_), None) => self.chain.len() >= self.full_every,
        };
        match chain_ends || (entries > 0 && changed >= entries.div_ceil(2)) {
            true => SnapshotKind::Full,
            false => SnapshotKind::Delta,
        }
    }

    /// Hand `f` the restored batches in epoch order, each with the vnodes
    /// its writer owned, one object's batch at a time (an object's bytes
    /// are dropped before the next is read); return the watermark each
    /// writer had reached in its newest object (tasks may have been at
    /// different ones, and a full snapshot's is older than its deltas').
    pub fn restore_each(
        &mut self,
        mut f: impl FnMut(&RecordBatch, VnodeRange) -> Result<(), TaskError>,
    ) -> Result<WriterWatermarks, TaskError> {
        enum Failed {
            Snapshot(crate::state::SnapshotError),
            Task(TaskError),
        }
        impl From<crate::state::SnapshotError> for Failed {
            fn from(e: crate::state::SnapshotError) -> Self {
                Failed::Snapshot(e)
            }
        }
        let mut writers = WriterWatermarks::default();
        for (object, bytes) in std::mem::take(&mut self.restored) {
            let read = StateSnapshot::read_batches(&object, &bytes, |batch| {
                writers.record(object.vnodes, saved_watermark(&batch));
                f(&batch, object.vnodes).map_err(Failed::Task)
            });
            match read {
                Ok(()) => {}
                Err(Failed::Task(e)) => return Err(e),
                Err(Failed::Snapshot(source)) => {
                    return Err(TaskError::Snapshot {
                        stage: self.stage.clone(),
                        source,
                    });
                }
            }
        }
        Ok(writers)
    }

    /// Write `snapshot` in the background; once durable, acknowledge the
    /// epoch with the task's chain of objects, `snapshot`'s last.
    fn send(&mut self, epoch: u64, format: &str, snapshot: Encoded, kind: SnapshotKind) {
        let key = EpochStore::state_key(epoch, &self.stage, self.task, self.vnodes);
        let (sha256, bytes) = match &snapshot {
            Encoded::Bytes(s) => (s.sha256.clone(), s.bytes.len() as u64),
            Encoded::File(f) => (f.sha256.clone(), f.len),
        };
        let object = StateObject {
            task: self.task,
            vnodes: self.vnodes,
            key: key.clone(),
            sha256,
            bytes,
            epoch,
            delta: kind == SnapshotKind::Delta,
        };
        if kind == SnapshotKind::Full {
            self.chain.clear();
        }
        self.chain.push(object);
        let objects = self.chain.clone();
        let acks = self.acks.clone();
        let control = Arc::clone(&self.control);
        let stage = self.stage.clone();
        let format = format.to_string();
        if let Err(e) = crate::epoch::fault_point("before-state", epoch) {
            if let Encoded::File(f) = &snapshot {
                let _ = std::fs::remove_file(&f.path);
            }
            control.fail(format!("checkpoint {epoch}: stage `{stage}`: {e}"));
            return;
        }
        let done = move |result: Result<(), crate::epoch::EpochError>| match result
            .and_then(|()| Ok(crate::epoch::fault_point("after-state", epoch)?))
        {
            Ok(()) => {
                let _ = acks.send(Ack::State {
                    stage,
                    epoch,
                    format,
                    objects,
                });
            }
            Err(e) => control.fail(format!(
                "checkpoint {epoch}: stage `{stage}` could not save its state: {e}"
            )),
        };
        match snapshot {
            Encoded::Bytes(s) => self.store.put_in_background(key, s.bytes, done),
            Encoded::File(f) => self.store.put_file_in_background(key, f.path, done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(epoch: u64) -> StateObject {
        StateObject {
            task: 0,
            vnodes: VnodeRange::of_task(0, 1),
            key: format!("state/{epoch}"),
            sha256: String::new(),
            bytes: 0,
            epoch,
            delta: epoch > 1,
        }
    }

    /// With `state_memory`, a chain restarts whole once its deltas add up
    /// to the bytes of its whole snapshot, however many epochs that takes.
    #[test]
    fn a_budgeted_chain_ends_when_its_deltas_weigh_what_its_whole_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EpochStore::open(&dir.path().display().to_string()).expect("store");
        let (acks, _acks) = crossbeam_channel::unbounded();
        let mut ctx = StateContext::new("s", 0, 1, &[], store, acks, Arc::default())
            .with_full_every(2)
            .with_memory_budget(Some((dir.path().join("spill"), 1 << 20)));
        let sized = |epoch: u64, bytes: u64| StateObject {
            bytes,
            ..object(epoch)
        };
        ctx.chain.push(sized(1, 1000));
        for epoch in 2..=11 {
            assert_eq!(ctx.next_kind(1, 100), SnapshotKind::Delta, "epoch {epoch}");
            ctx.chain.push(sized(epoch, 100));
        }
        assert_eq!(
            ctx.next_kind(1, 100),
            SnapshotKind::Full,
            "1000 bytes of deltas"
        );
        assert_eq!(ctx.next_kind(0, 0), SnapshotKind::Full);
        ctx.chain.truncate(1);
        ctx.chain
            .extend((0..MAX_BUDGETED_DELTAS as u64).map(|e| sized(e + 2, 0)));
        assert_eq!(ctx.next_kind(1, 100), SnapshotKind::Full, "empty deltas");
        ctx.chain.pop();
        assert_eq!(ctx.next_kind(1, 100), SnapshotKind::Delta);
    }

    /// A chain starts whole and restarts whole every `full_every` epochs;
    /// between, a snapshot is a delta unless half the entries or more
    /// changed: then it is whole (it costs the same to write, and a restart
    /// reads it alone instead of it and the chain before it).
    #[test]
    fn a_delta_of_half_the_entries_or_more_is_written_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EpochStore::open(&dir.path().display().to_string()).expect("store");
        let (acks, _acks) = crossbeam_channel::unbounded();
        let mut ctx =
            StateContext::new("s", 0, 1, &[], store, acks, Arc::default()).with_full_every(4);
        assert_eq!(
            ctx.next_kind(0, 100),
            SnapshotKind::Full,
            "a chain starts whole"
        );
        ctx.chain.push(object(1));
        assert_eq!(ctx.next_kind(10, 100), SnapshotKind::Delta);
        assert_eq!(ctx.next_kind(49, 100), SnapshotKind::Delta);
        assert_eq!(ctx.next_kind(50, 100), SnapshotKind::Full);
        assert_eq!(ctx.next_kind(3, 5), SnapshotKind::Full);
        assert_eq!(
            ctx.next_kind(0, 0),
            SnapshotKind::Delta,
            "nothing held, nothing changed"
        );
        ctx.chain.extend([object(2), object(3), object(4)]);
        assert_eq!(
            ctx.next_kind(0, 100),
            SnapshotKind::Full,
            "every full_every epochs"
        );
    }
}
