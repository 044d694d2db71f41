//! Incremental state snapshots against full ones, measured in the same run
//! (figures are printed, never asserted).
//!
//! One task's [`StateTable`] holds `FV_BENCH_GROUPS` groups (default 1 M)
//! of a count/sum/float accumulator, as a window aggregate keeps them. Each
//! epoch touches `FV_BENCH_TOUCHED` per mille of them (default 10, 1 %) at
//! random, then snapshots: whole, and as a delta. Printed: bytes and time
//! per checkpoint, both ways, and the time to restore the state from one
//! full snapshot vs from a full snapshot and the `full_every − 1` deltas
//! after it (the longest chain a restore reads, default 10 epochs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field};

use fvhost::state::{
    SnapshotKind, StateError, StateObject, StateSnapshot, StateTable, ValueCodec, ValueRows,
    VnodeRange, named,
};

/// A group's accumulators: a count, an integer sum, a float sum.
#[derive(Clone, Copy)]
struct Accs {
    count: i64,
    sum: i64,
    float: f64,
}

struct AccsCodec;

impl ValueCodec for AccsCodec {
    type Value = Accs;

    fn fields(&self) -> Vec<Field> {
        vec![
            Field::new("count", DataType::Int64, false),
            Field::new("sum", DataType::Int64, false),
            Field::new("float", DataType::Float64, false),
        ]
    }

    fn encode(&self, values: &[&Accs]) -> Result<ValueRows, StateError> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(values.iter().map(|a| a.count))),
            Arc::new(Int64Array::from_iter_values(values.iter().map(|a| a.sum))),
            Arc::new(Float64Array::from_iter_values(
                values.iter().map(|a| a.float),
            )),
        ];
        Ok((columns, vec![1; values.len()]))
    }

    fn decode(&self, batch: &RecordBatch, rows: &[usize]) -> Result<Vec<Accs>, StateError> {
        let count = named::<Int64Array>(batch, "count", DataType::Int64)?;
        let sum = named::<Int64Array>(batch, "sum", DataType::Int64)?;
        let float = named::<Float64Array>(batch, "float", DataType::Float64)?;
        Ok(rows
            .iter()
            .map(|&r| Accs {
                count: count.value(r),
                sum: sum.value(r),
                float: float.value(r),
            })
            .collect())
    }

    fn merge(&self, into: &mut Accs, more: Accs) {
        into.count += more.count;
        into.sum += more.sum;
        into.float += more.float;
    }
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Encode `table` as a snapshot of `kind`: its bytes and the time taken.
fn checkpoint(table: &StateTable<AccsCodec>, kind: SnapshotKind) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let schema = Arc::new(table.snapshot_schema(kind));
    let columns = table.snapshot_columns(kind).expect("columns");
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch");
    let snapshot = StateSnapshot::encode("bench", &schema, &[batch]).expect("encode");
    (snapshot.bytes, started.elapsed())
}

/// Restore a table from `chain` (a full snapshot, then deltas).
fn restore(chain: &[Vec<u8>]) -> (usize, Duration) {
    let started = Instant::now();
    let mut table = StateTable::new(AccsCodec, Some("window_start"), VnodeRange::all());
    for bytes in chain {
        let object = StateObject {
            task: 0,
            vnodes: VnodeRange::all(),
            key: "bench".into(),
            sha256: hex_sha256(bytes),
            bytes: bytes.len() as u64,
            epoch: 1,
            delta: false,
        };
        for batch in StateSnapshot::decode(&object, bytes).expect("decode") {
            table.restore(&batch, VnodeRange::all()).expect("restore");
        }
    }
    (table.len(), started.elapsed())
}

fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

fn main() {
    let groups = setting("FV_BENCH_GROUPS", 1_000_000);
    let touched = groups * setting("FV_BENCH_TOUCHED", 10) / 1000;
    let epochs = setting("FV_BENCH_FULL_EVERY", 10).max(2) as usize;
    let key = |i: u64| i.to_be_bytes();
    let mut table = StateTable::new(AccsCodec, Some("window_start"), VnodeRange::all());
    for i in 0..groups {
        let accs = table.get_or_insert_with(0, &key(i), || Accs {
            count: 0,
            sum: 0,
            float: 0.0,
        });
        *accs.expect("in memory") = Accs {
            count: 1,
            sum: i as i64,
            float: i as f64,
        };
    }
    let (first, _) = checkpoint(&table, SnapshotKind::Full);
    table.mark_saved();
    println!(
        "state: {groups} groups, {touched} touched per epoch, a full snapshot every {epochs} epochs"
    );
    println!(
        "{:>6} {:>14} {:>12} {:>14} {:>12} {:>8}",
        "epoch", "full bytes", "full ms", "delta bytes", "delta ms", "ratio"
    );
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut chain = vec![first];
    let (mut full_total, mut delta_total) = (Duration::ZERO, Duration::ZERO);
    let (mut full_bytes, mut delta_bytes) = (0usize, 0usize);
    for epoch in 1..epochs {
        for _ in 0..touched {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if let Some(accs) = table.get_mut(0, &key(seed % groups)).expect("in memory") {
                accs.count += 1;
                accs.sum += 7;
            }
        }
        let (full, full_time) = checkpoint(&table, SnapshotKind::Full);
        let (delta, delta_time) = checkpoint(&table, SnapshotKind::Delta);
        table.mark_saved();
        println!(
            "{epoch:>6} {:>14} {:>12.1} {:>14} {:>12.1} {:>7.1}x",
            full.len(),
            full_time.as_secs_f64() * 1e3,
            delta.len(),
            delta_time.as_secs_f64() * 1e3,
            full.len() as f64 / delta.len().max(1) as f64
        );
        full_total += full_time;
        delta_total += delta_time;
        full_bytes += full.len();
        delta_bytes += delta.len();
        chain.push(delta);
    }
    let n = (epochs - 1) as f64;
    println!(
        "per checkpoint: full {:.1} MB in {:.1} ms, delta {:.2} MB in {:.1} ms ({:.1}x fewer bytes, {:.1}x faster)",
        full_bytes as f64 / n / 1e6,
        full_total.as_secs_f64() * 1e3 / n,
        delta_bytes as f64 / n / 1e6,
        delta_total.as_secs_f64() * 1e3 / n,
        full_bytes as f64 / delta_bytes.max(1) as f64,
        full_total.as_secs_f64() / delta_total.as_secs_f64().max(1e-9)
    );
    let (whole, _) = checkpoint(&table, SnapshotKind::Full);
    let (n_full, t_full) = restore(std::slice::from_ref(&whole));
    let (n_chain, t_chain) = restore(&chain);
    assert_eq!(
        n_full, n_chain,
        "a chain restores the same number of groups"
    );
    println!(
        "restore: one full snapshot {:.0} ms; full + {} deltas {:.0} ms ({:.2}x)",
        t_full.as_secs_f64() * 1e3,
        chain.len() - 1,
        t_chain.as_secs_f64() * 1e3,
        t_chain.as_secs_f64() / t_full.as_secs_f64().max(1e-9)
    );
}
