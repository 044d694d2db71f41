//! Test support for the stateful operators: a [`Harness`] that runs the
//! tasks of one stage the way the executor does — rows routed by key hash,
//! every task told the watermark, state snapshotted through the real epoch
//! store at a barrier and restored onto another parallelism — and an
//! oracle: DataFusion batch SQL over the same rows, compared as sorted,
//! normalised text rows.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use crossbeam_channel::{Receiver, unbounded};

use super::StatefulPlan;
use crate::epoch::EpochStore;
use crate::runtime::checkpoint::StateContext;
use crate::runtime::message::{Message, Watermark};
use crate::runtime::metrics::StageMetrics;
use crate::runtime::operator::{Downstream, Emitter, Operator};
use crate::state::{KeyHasher, SavedObject, StateObject, VnodeRange};

/// 2024-01-01 in epoch milliseconds: the base of generated times.
pub const BASE_MS: i64 = 1_704_067_200_000;

/// A seeded generator (splitmix64).
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// `(auction, price, bidder, date_time)` rows: row i is due at
/// `i · step_ms` and arrives up to `delay_ms` late in event time; about one
/// price in ten is null.
pub fn bids(seed: u64, rows: usize, keys: i64, step_ms: i64, delay_ms: i64) -> RecordBatch {
    let mut rng = Rng::new(seed);
    let (mut auction, mut price, mut bidder, mut time) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..rows as i64 {
        auction.push(rng.below(keys as u64) as i64);
        let p = rng.below(1000) as i64;
        price.push((p % 10 != 0).then_some(p));
        bidder.push(format!("b{}", rng.below(7)));
        time.push(BASE_MS + i * step_ms + rng.below(delay_ms as u64 + 1) as i64);
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, false),
        Field::new("price", DataType::Int64, true),
        Field::new("bidder", DataType::Utf8, false),
        Field::new(
            "date_time",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(auction)),
        Arc::new(Int64Array::from(price)),
        Arc::new(StringArray::from(bidder)),
        Arc::new(TimestampMillisecondArray::from(time)),
    ];
    RecordBatch::try_new(schema, columns).expect("bids")
}

/// The tasks of one stateful stage, fed like the executor feeds them.
pub struct Harness {
    plan: StatefulPlan,
    /// Key columns per input.
    keys: Vec<Vec<String>>,
    store: EpochStore,
    _dir: tempfile::TempDir,
    ops: Vec<Box<dyn Operator>>,
    out: Emitter,
    rows: Receiver<Message>,
    epoch: u64,
    /// Per input: the newest event time seen (ms), for watermarks.
    pub newest: Vec<i64>,
    /// Output rows collected so far.
    pub output: Vec<RecordBatch>,
}

impl Harness {
    /// `parallelism` fresh tasks of `plan`, whose inputs are keyed by `keys`.
    pub fn new(plan: StatefulPlan, keys: Vec<Vec<String>>, parallelism: usize) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EpochStore::open(&dir.path().display().to_string()).expect("store");
        let (tx, rows) = unbounded();
        let out = Emitter::new(
            vec![Downstream::new(vec![tx])],
            None,
            Arc::new(StageMetrics::default()),
        );
        let inputs = keys.len();
        let mut h = Harness {
            plan,
            keys,
            store,
            _dir: dir,
            ops: Vec::new(),
            out,
            rows,
            epoch: 0,
            newest: vec![i64::MIN; inputs],
            output: Vec::new(),
        };
        h.ops = h.tasks(parallelism, &[]);
        h
    }

    fn tasks(&self, parallelism: usize, restored: &[SavedObject]) -> Vec<Box<dyn Operator>> {
        let (acks, _) = unbounded();
        (0..parallelism)
            .map(|t| {
                let ctx = StateContext::new(
                    "stage",
                    t as u32,
                    parallelism,
                    restored,
                    self.store.clone(),
                    acks.clone(),
                    Arc::default(),
                );
                self.plan.clone().operator(ctx).expect("task")
            })
            .collect()
    }

    /// Route `batch` of input `input` to the tasks owning its keys.
    pub fn feed(&mut self, input: usize, batch: &RecordBatch) {
        let schema = batch.schema();
        let hasher = KeyHasher::new(&schema, &self.keys[input]).expect("hasher");
        let owners = VnodeRange::owners(self.ops.len());
        let vnodes = hasher.vnodes(batch).expect("vnodes");
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); self.ops.len()];
        for (r, v) in vnodes.iter().enumerate() {
            rows[owners[*v as usize]].push(r as u32);
        }
        for (task, indices) in rows.into_iter().enumerate() {
            if indices.is_empty() {
                continue;
            }
            let indices = arrow::array::UInt32Array::from(indices);
            let part = arrow::compute::take_record_batch(batch, &indices).expect("take");
            self.ops[task]
                .on_batch(input, part, &mut self.out)
                .expect("batch");
        }
        if let Some(i) = schema
            .index_of("date_time")
            .ok()
            .or(schema.index_of("t").ok())
        {
            let ms = cast(batch.column(i), &DataType::Int64).expect("cast");
            let ms = ms.as_any().downcast_ref::<Int64Array>().expect("ms");
            for v in ms.iter().flatten() {
                self.newest[input] = self.newest[input].max(v);
            }
        }
        self.drain();
    }

    /// Hand `batch` to task 0 as it is, not routed: its failure.
    pub fn feed_unrouted(
        &mut self,
        input: usize,
        batch: RecordBatch,
    ) -> Result<(), crate::runtime::TaskError> {
        self.ops[0].on_batch(input, batch, &mut self.out)
    }

    /// Tell every task the watermark is `ms` (milliseconds).
    pub fn watermark(&mut self, ms: i64) {
        for op in &mut self.ops {
            op.on_watermark(Watermark::At(ms * 1000), &mut self.out)
                .expect("watermark");
        }
        self.drain();
    }

    /// Checkpoint every task through the epoch store and restore the state
    /// onto `parallelism` new tasks.
    pub fn restart(&mut self, parallelism: usize) {
        self.epoch += 1;
        let before = std::mem::take(&mut self.ops);
        let n = before.len();
        for mut op in before {
            op.on_barrier(self.epoch, &mut self.out).expect("barrier");
        }
        // The old tasks are gone, and with them the state they reported.
        self.out
            .metrics
            .state_groups
            .store(0, std::sync::atomic::Ordering::Relaxed);
        let objects = (0..n)
            .map(|t| self.saved_object(t as u32, VnodeRange::of_task(t, n)))
            .collect::<Vec<_>>();
        self.ops = self.tasks(parallelism, &objects);
    }

    /// Task `task`'s object of the newest epoch, read back from the store
    /// once its background write is done.
    fn saved_object(&self, task: u32, vnodes: VnodeRange) -> SavedObject {
        use sha2::Digest;
        let key = EpochStore::state_key(self.epoch, "stage", task, vnodes);
        for _ in 0..1000 {
            if let Ok(bytes) = self.store.get_shared(&key) {
                let object = StateObject {
                    task,
                    vnodes,
                    key,
                    sha256: hex::encode(sha2::Sha256::digest(&bytes)),
                    bytes: bytes.len() as u64,
                    epoch: 1,
                    delta: false,
                };
                return (object, bytes);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("state object {key} never reached the store");
    }

    /// End every input: fire everything still held.
    pub fn finish(&mut self) {
        for op in &mut self.ops {
            op.on_watermark(Watermark::END, &mut self.out).expect("end");
        }
        self.drain();
    }

    fn drain(&mut self) {
        while let Ok(m) = self.rows.try_recv() {
            if let Message::Batch(b, _) = m {
                self.output.push(b);
            }
        }
    }

    /// Rows counted late so far.
    pub fn late_rows(&self) -> u64 {
        self.out
            .metrics
            .late_rows
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// State held (groups or rows) as the gauge says.
    pub fn state_held(&self) -> u64 {
        self.out
            .metrics
            .state_groups
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Run `sql` over `tables` with DataFusion batch execution.
pub fn oracle(tables: &[(&str, &RecordBatch)], sql: &str) -> Vec<RecordBatch> {
    use datafusion::datasource::MemTable;
    use datafusion::prelude::SessionContext;
    let ctx = SessionContext::new();
    for (name, batch) in tables {
        let table = MemTable::try_new(batch.schema(), vec![vec![(*batch).clone()]]).expect("table");
        ctx.register_table(*name, Arc::new(table))
            .expect("register");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    runtime
        .block_on(async { ctx.sql(sql).await?.collect().await })
        .unwrap_or_else(|e| panic!("oracle query failed: {e}\n{sql}"))
}

/// Columns `columns` of `batches` as sorted text rows: timestamps as epoch
/// milliseconds, integers as i64, floats to 6 decimals — so results of
/// either engine compare whatever their exact types.
pub fn text_rows(batches: &[RecordBatch], columns: &[&str]) -> Vec<String> {
    let mut rows = Vec::new();
    for b in batches {
        let schema: SchemaRef = b.schema();
        let arrays: Vec<ArrayRef> = columns
            .iter()
            .map(|c| {
                let i = schema
                    .index_of(c)
                    .unwrap_or_else(|_| panic!("no column {c} in {schema}"));
                let a = b.column(i);
                match a.data_type() {
                    DataType::Timestamp(_, _) => {
                        let ms =
                            cast(a, &DataType::Timestamp(TimeUnit::Millisecond, None)).expect("ts");
                        cast(&ms, &DataType::Int64).expect("ms")
                    }
                    DataType::Int8
                    | DataType::Int16
                    | DataType::Int32
                    | DataType::UInt8
                    | DataType::UInt16
                    | DataType::UInt32
                    | DataType::UInt64 => cast(a, &DataType::Int64).expect("int"),
                    DataType::Float32 | DataType::Float64 => {
                        let f = cast(a, &DataType::Float64).expect("float");
                        let f = f
                            .as_any()
                            .downcast_ref::<arrow::array::Float64Array>()
                            .expect("f64")
                            .iter()
                            .map(|v| v.map(|v| format!("{v:.6}")))
                            .collect::<StringArray>();
                        Arc::new(f) as ArrayRef
                    }
                    _ => Arc::clone(a),
                }
            })
            .collect();
        let options = FormatOptions::default().with_null("null");
        let formatters: Vec<ArrayFormatter> = arrays
            .iter()
            .map(|a| ArrayFormatter::try_new(a.as_ref(), &options).expect("formatter"))
            .collect();
        for r in 0..b.num_rows() {
            let row: Vec<String> = formatters.iter().map(|f| f.value(r).to_string()).collect();
            rows.push(row.join("|"));
        }
    }
    rows.sort_unstable();
    rows
}
