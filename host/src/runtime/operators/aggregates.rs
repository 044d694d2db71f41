//! [`Aggregates`]: the aggregate functions of a window or session stage,
//! bound to the input schema — what each keeps per group ([`GroupAccs`]),
//! how it folds a row in and merges two groups (sessions), the column it
//! emits, and how a group is snapshotted and read back.
//!
//! Numeric values fold as `i64` (integer inputs) or `f64` (floats and
//! decimals) into one fixed-width [`Acc`]; `first_value`/`last_value` also
//! keep the event time of the value; `count(DISTINCT …)` keeps the set of
//! values seen, as Arrow row-format bytes (exact, for any type). Snapshots
//! hold three columns per aggregate, plus the time for first/last and the
//! encoded set for distinct counts.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BinaryArray, Float64Array, Int64Array, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::error::ArrowError;
use arrow::row::{RowConverter, Rows, SortField};

use super::rows::SettingError;
use crate::state::{StateError, ValueCodec, ValueRows, named};
use crate::topology::{Aggregate, AggregateFn};

/// How an aggregate reads its input column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numeric {
    /// Integers, folded as `i64`.
    Int,
    /// Floats and decimals, folded as `f64`.
    Float,
}

impl Numeric {
    /// The folding of `t`, or `None` if it is not numeric.
    pub fn of(t: &DataType) -> Option<Numeric> {
        match t {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => Some(Numeric::Int),
            DataType::Float16
            | DataType::Float32
            | DataType::Float64
            | DataType::Decimal128(_, _)
            | DataType::Decimal256(_, _) => Some(Numeric::Float),
            _ => None,
        }
    }
}

/// One aggregate, bound to its input column.
#[derive(Debug, Clone)]
struct Bound {
    function: AggregateFn,
    /// Input column and its folding (`None` for `count(*)`).
    input: Option<(usize, Option<Numeric>)>,
    alias: String,
    /// For `count(DISTINCT …)`: its set's index in [`GroupAccs::sets`].
    set: Option<usize>,
    /// For `min`/`max` of a column that is not numeric (text, dates…): the
    /// index of its value in [`GroupAccs::extremes`], and the column's type.
    extreme: Option<(usize, DataType)>,
}

impl Bound {
    fn int(&self) -> bool {
        matches!(self.input, Some((_, Some(Numeric::Int))))
    }

    fn timed(&self) -> bool {
        matches!(
            self.function,
            AggregateFn::FirstValue | AggregateFn::LastValue
        )
    }
}

/// The running value of one aggregate for one group. `count` is the number
/// of values folded (rows for `count(*)`); `int`/`float` hold the sum, min,
/// max or first/last value (for integer inputs `float` is the sum, used by
/// `avg`); `time` is the event time of a first/last value.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Acc {
    /// Values folded.
    pub count: i64,
    /// Integer sum/min/max/first/last.
    pub int: i64,
    /// Float sum/min/max/first/last (or the float sum of integers).
    pub float: f64,
    /// Event time (µs) of the first/last value.
    pub time: i64,
}

/// Everything one group keeps.
#[derive(Debug, Clone, Default)]
pub struct GroupAccs {
    accs: Vec<Acc>,
    /// One set of encoded values per distinct count.
    sets: Vec<HashSet<Box<[u8]>>>,
    /// One value per non-numeric `min`/`max`, in Arrow's row format (whose
    /// byte order is the values' order); `None` before any value.
    extremes: Vec<Option<Box<[u8]>>>,
}

/// A group's result without its distinct sets: enough to emit it again.
#[derive(Debug, Clone)]
pub struct GroupResult {
    accs: Vec<Acc>,
    distinct: Vec<usize>,
    extremes: Vec<Option<Box<[u8]>>>,
}

/// What [`Aggregates::finish`] reads of a group.
pub trait Finished {
    /// The accumulator of aggregate `i`.
    fn acc(&self, i: usize) -> Acc;
    /// The number of distinct values in set `set`.
    fn distinct(&self, set: usize) -> usize;
    /// Non-numeric `min`/`max` number `e`, row-encoded.
    fn extreme(&self, e: usize) -> Option<&[u8]>;
}

impl Finished for GroupAccs {
    fn acc(&self, i: usize) -> Acc {
        self.accs[i]
    }
    fn distinct(&self, set: usize) -> usize {
        self.sets[set].len()
    }
    fn extreme(&self, e: usize) -> Option<&[u8]> {
        self.extremes[e].as_deref()
    }
}

impl Finished for GroupResult {
    fn acc(&self, i: usize) -> Acc {
        self.accs[i]
    }
    fn distinct(&self, set: usize) -> usize {
        self.distinct[set]
    }
    fn extreme(&self, e: usize) -> Option<&[u8]> {
        self.extremes[e].as_deref()
    }
}

/// An aggregate's input of one batch, ready to fold.
pub enum Values {
    /// `count(*)`: every row counts.
    Rows,
    /// `count(col)` of a non-numeric column: non-null rows count.
    Present(ArrayRef),
    /// Integers.
    Int(Int64Array),
    /// Floats.
    Float(Float64Array),
    /// `count(DISTINCT col)`: each row's value as bytes, and the column
    /// (for its nulls).
    Encoded(Rows, ArrayRef),
    /// `min`/`max` of a non-numeric column: each row's value as bytes that
    /// sort as the values do, and the column (for its nulls).
    Ordered(Rows, ArrayRef),
}

/// The aggregates of one stage.
#[derive(Debug, Clone)]
pub struct Aggregates {
    list: Vec<Bound>,
    sets: usize,
    extremes: usize,
}

impl Aggregates {
    /// Bind `aggregates` to `schema`; the error names the aggregate at fault.
    pub fn bind(aggregates: &[Aggregate], schema: &Schema) -> Result<Self, SettingError> {
        let mut list = Vec::new();
        let mut sets = 0;
        let mut extremes = 0;
        for (n, a) in aggregates.iter().enumerate() {
            let at = || format!("aggregates.{n}");
            let name = a.function.sql_name();
            let input = match &a.column {
                None => None,
                Some(c) => {
                    let i = schema.index_of(c).map_err(|_| {
                        (
                            at(),
                            format!(
                                "no column `{c}` in the input (columns: {})",
                                column_names(schema)
                            ),
                        )
                    })?;
                    let t = schema.field(i).data_type();
                    let numeric = Numeric::of(t);
                    let any_type =
                        matches!(a.function, AggregateFn::Count | AggregateFn::CountDistinct)
                            || (numeric.is_none()
                                && matches!(a.function, AggregateFn::Min | AggregateFn::Max));
                    if numeric.is_none() && !any_type {
                        return Err((at(), format!("`{c}` is {t}; {name} needs a numeric column")));
                    }
                    if a.function == AggregateFn::CountDistinct || numeric.is_none() {
                        RowConverter::new(vec![SortField::new(t.clone())])
                            .map_err(|e| (at(), format!("cannot compute {name} of {t}: {e}")))?;
                    }
                    Some((i, numeric))
                }
            };
            let set = (a.function == AggregateFn::CountDistinct).then(|| {
                sets += 1;
                sets - 1
            });
            let extreme = match (a.function, input) {
                (AggregateFn::Min | AggregateFn::Max, Some((i, None))) => {
                    extremes += 1;
                    Some((extremes - 1, schema.field(i).data_type().clone()))
                }
                _ => None,
            };
            list.push(Bound {
                function: a.function,
                input,
                alias: a.alias.clone(),
                set,
                extreme,
            });
        }
        Ok(Aggregates {
            list,
            sets,
            extremes,
        })
    }

    /// The output fields, one per aggregate.
    pub fn fields(&self) -> Vec<Field> {
        self.list
            .iter()
            .map(|b| {
                let t = match b.function {
                    AggregateFn::Count | AggregateFn::CountDistinct => {
                        return Field::new(&b.alias, DataType::Int64, false);
                    }
                    AggregateFn::Avg => DataType::Float64,
                    _ if b.extreme.is_some() => {
                        b.extreme.as_ref().map_or(DataType::Null, |e| e.1.clone())
                    }
                    _ if b.int() => DataType::Int64,
                    _ => DataType::Float64,
                };
                Field::new(&b.alias, t, true)
            })
            .collect()
    }

    /// A group that has folded nothing.
    pub fn new_group(&self) -> GroupAccs {
        GroupAccs {
            accs: vec![Acc::default(); self.list.len()],
            sets: vec![HashSet::new(); self.sets],
            extremes: vec![None; self.extremes],
        }
    }

    /// The inputs of `batch`, cast and encoded for folding.
    pub fn values(&self, batch: &RecordBatch) -> Result<Vec<Values>, ArrowError> {
        let columns = batch.columns();
        self.list
            .iter()
            .map(|b| {
                Ok(match (b.function, b.input) {
                    (_, None) => Values::Rows,
                    (AggregateFn::Min | AggregateFn::Max, Some((i, None))) => {
                        let c = &columns[i];
                        let converter =
                            RowConverter::new(vec![SortField::new(c.data_type().clone())])?;
                        Values::Ordered(converter.convert_columns(&[Arc::clone(c)])?, Arc::clone(c))
                    }
                    (AggregateFn::CountDistinct, Some((i, _))) => {
                        let c = &columns[i];
                        let converter =
                            RowConverter::new(vec![SortField::new(c.data_type().clone())])?;
                        Values::Encoded(converter.convert_columns(&[Arc::clone(c)])?, Arc::clone(c))
                    }
                    (_, Some((i, None))) => Values::Present(Arc::clone(&columns[i])),
                    (_, Some((i, Some(Numeric::Int)))) => {
                        let a = cast(&columns[i], &DataType::Int64)?;
                        Values::Int(downcast::<Int64Array>(&a)?.clone())
                    }
                    (_, Some((i, Some(Numeric::Float)))) => {
                        let a = cast(&columns[i], &DataType::Float64)?;
                        Values::Float(downcast::<Float64Array>(&a)?.clone())
                    }
                })
            })
            .collect()
    }

    /// Fold row `row` (event time `t`, µs) into `group`.
    pub fn fold(&self, group: &mut GroupAccs, values: &[Values], row: usize, t: i64) {
        for (b, (acc, v)) in self.list.iter().zip(group.accs.iter_mut().zip(values)) {
            match v {
                Values::Rows => acc.count += 1,
                Values::Present(a) => acc.count += i64::from(a.is_valid(row)),
                Values::Encoded(rows, column) => {
                    if let Some(set) = b.set.filter(|_| column.is_valid(row)) {
                        let value = rows.row(row);
                        if !group.sets[set].contains(value.data()) {
                            group.sets[set].insert(value.data().into());
                        }
                    }
                }
                Values::Ordered(rows, column) => {
                    if let Some((e, _)) = b.extreme.as_ref().filter(|_| column.is_valid(row)) {
                        acc.count += 1;
                        keep_extreme(b.function, &mut group.extremes[*e], rows.row(row).data());
                    }
                }
                Values::Int(a) => {
                    if a.is_valid(row) {
                        fold_one(b.function, acc, Some(a.value(row)), a.value(row) as f64, t);
                    }
                }
                Values::Float(a) => {
                    if a.is_valid(row) {
                        fold_one(b.function, acc, None, a.value(row), t);
                    }
                }
            }
        }
    }

    /// The accumulator of aggregate `i` of `group` (empty if none).
    pub fn acc_of(&self, group: &GroupAccs, i: usize) -> Acc {
        group.accs.get(i).copied().unwrap_or_default()
    }

    /// Take row `row` back out of `group` (a retraction: a changelog's
    /// `-U` or `-D`). Only `count`, `sum` and `avg` can: the plan refuses
    /// the others over a changelog ([`AggregateFn::retracts`]), and they
    /// are left as they are here.
    pub fn unfold(&self, group: &mut GroupAccs, values: &[Values], row: usize) {
        for (b, (acc, v)) in self.list.iter().zip(group.accs.iter_mut().zip(values)) {
            let summed = matches!(b.function, AggregateFn::Sum | AggregateFn::Avg);
            match v {
                Values::Rows => acc.count -= 1,
                Values::Present(a) => acc.count -= i64::from(a.is_valid(row)),
                Values::Int(a) if a.is_valid(row) => {
                    if summed {
                        acc.int = acc.int.wrapping_sub(a.value(row));
                        acc.float -= a.value(row) as f64;
                    }
                    acc.count -= 1;
                }
                Values::Float(a) if a.is_valid(row) => {
                    if summed {
                        acc.float -= a.value(row);
                    }
                    acc.count -= 1;
                }
                _ => {}
            }
        }
    }

    /// Fold `from` into `into` (two sessions merging).
    pub fn merge(&self, into: &mut GroupAccs, from: &GroupAccs) {
        for (b, (a, f)) in self.list.iter().zip(into.accs.iter_mut().zip(&from.accs)) {
            if f.count == 0 {
                continue;
            }
            if a.count == 0 {
                *a = *f;
                continue;
            }
            match b.function {
                AggregateFn::Count | AggregateFn::CountDistinct => {}
                AggregateFn::Sum | AggregateFn::Avg => {
                    a.int = a.int.wrapping_add(f.int);
                    a.float += f.float;
                }
                AggregateFn::Min
                | AggregateFn::Max
                | AggregateFn::FirstValue
                | AggregateFn::LastValue => {
                    // Folding the other side's winner in picks the same
                    // winner as folding all its values.
                    let count = a.count;
                    fold_one(b.function, a, b.int().then_some(f.int), f.float, f.time);
                    a.count = count;
                }
            }
            a.count += f.count;
        }
        for (into, from) in into.sets.iter_mut().zip(&from.sets) {
            for v in from {
                if !into.contains(v) {
                    into.insert(v.clone());
                }
            }
        }
        for b in &self.list {
            if let Some((e, _)) = &b.extreme
                && let Some(value) = &from.extremes[*e]
            {
                keep_extreme(b.function, &mut into.extremes[*e], value);
            }
        }
    }

    /// The output columns of `groups`, one per aggregate.
    pub fn finish<G: Finished>(&self, groups: &[&G]) -> Vec<ArrayRef> {
        self.list
            .iter()
            .enumerate()
            .map(|(i, b)| -> ArrayRef {
                let accs = groups.iter().map(|g| g.acc(i));
                match b.function {
                    AggregateFn::Count => {
                        Arc::new(Int64Array::from_iter_values(accs.map(|a| a.count)))
                    }
                    AggregateFn::CountDistinct => {
                        let set = b.set.unwrap_or(0);
                        Arc::new(Int64Array::from_iter_values(
                            groups.iter().map(|g| g.distinct(set) as i64),
                        ))
                    }
                    AggregateFn::Avg => Arc::new(Float64Array::from_iter(
                        accs.map(|a| (a.count > 0).then(|| a.float / a.count as f64)),
                    )),
                    _ if b.extreme.is_some() => {
                        let (e, t) = b
                            .extreme
                            .as_ref()
                            .map_or((0, DataType::Null), |(e, t)| (*e, t.clone()));
                        decode_extremes(&t, groups.iter().map(|g| g.extreme(e)))
                    }
                    _ if b.int() => Arc::new(Int64Array::from_iter(
                        accs.map(|a| (a.count > 0).then_some(a.int)),
                    )),
                    _ => Arc::new(Float64Array::from_iter(
                        accs.map(|a| (a.count > 0).then_some(a.float)),
                    )),
                }
            })
            .collect()
    }

    /// Whether `a` and `b` emit the same figures in their first `n`
    /// aggregates ([`Aggregates::finish`]'s values: a `max` that folded a
    /// lower value is the same, though its accumulator counted one more).
    /// An updating stage over a changelog hides its row count after them.
    pub fn same_first_figures<G: Finished>(&self, a: &G, b: &G, n: usize) -> bool {
        self.list.iter().take(n).enumerate().all(|(i, f)| {
            let (x, y) = (a.acc(i), b.acc(i));
            let some = |acc: Acc| acc.count > 0;
            match f.function {
                AggregateFn::Count => x.count == y.count,
                AggregateFn::CountDistinct => {
                    let set = f.set.unwrap_or(0);
                    a.distinct(set) == b.distinct(set)
                }
                AggregateFn::Avg => {
                    let avg = |acc: Acc| some(acc).then(|| acc.float / acc.count as f64);
                    avg(x) == avg(y)
                }
                _ if f.extreme.is_some() => {
                    let e = f.extreme.as_ref().map_or(0, |(e, _)| *e);
                    a.extreme(e) == b.extreme(e)
                }
                _ if f.int() => some(x).then_some(x.int) == some(y).then_some(y.int),
                _ => some(x).then_some(x.float) == some(y).then_some(y.float),
            }
        })
    }

    /// What `group` would emit now, kept apart from it (an updating
    /// aggregate's previous result): its accumulators and the size of each
    /// distinct set, not the sets.
    pub fn result_of(&self, group: &GroupAccs) -> GroupResult {
        GroupResult {
            accs: group.accs.clone(),
            distinct: group.sets.iter().map(HashSet::len).collect(),
            extremes: group.extremes.clone(),
        }
    }

    /// The snapshot fields of one group.
    pub fn snapshot_fields(&self) -> Vec<Field> {
        let mut fields = Vec::new();
        for (i, b) in self.list.iter().enumerate() {
            fields.push(Field::new(format!("a{i}_count"), DataType::Int64, false));
            fields.push(Field::new(format!("a{i}_int"), DataType::Int64, false));
            fields.push(Field::new(format!("a{i}_float"), DataType::Float64, false));
            if b.timed() {
                fields.push(Field::new(format!("a{i}_time"), DataType::Int64, false));
            }
            if b.set.is_some() {
                fields.push(Field::new(format!("a{i}_set"), DataType::Binary, false));
            }
            if b.extreme.is_some() {
                fields.push(Field::new(format!("a{i}_value"), DataType::Binary, true));
            }
        }
        fields
    }

    /// The snapshot columns of `groups`.
    pub fn snapshot_columns(&self, groups: &[&GroupAccs]) -> Vec<ArrayRef> {
        let mut columns: Vec<ArrayRef> = Vec::new();
        for (i, b) in self.list.iter().enumerate() {
            let accs = || groups.iter().map(move |g| g.accs[i]);
            columns.push(Arc::new(Int64Array::from_iter_values(
                accs().map(|a| a.count),
            )));
            columns.push(Arc::new(Int64Array::from_iter_values(
                accs().map(|a| a.int),
            )));
            columns.push(Arc::new(Float64Array::from_iter_values(
                accs().map(|a| a.float),
            )));
            if b.timed() {
                columns.push(Arc::new(Int64Array::from_iter_values(
                    accs().map(|a| a.time),
                )));
            }
            if let Some(set) = b.set {
                let encoded: Vec<Vec<u8>> =
                    groups.iter().map(|g| encode_set(&g.sets[set])).collect();
                columns.push(Arc::new(BinaryArray::from_iter_values(encoded)));
            }
            if let Some((e, _)) = &b.extreme {
                columns.push(Arc::new(BinaryArray::from_iter(
                    groups.iter().map(|g| g.extremes[*e].as_deref()),
                )));
            }
        }
        columns
    }

    /// Read groups back from the snapshot columns of `batch`, by name.
    pub fn reader<'b>(&self, batch: &'b RecordBatch) -> Result<GroupReader<'b>, StateError> {
        let mut readers = Vec::new();
        for (i, b) in self.list.iter().enumerate() {
            let int = |suffix: &str| {
                named::<Int64Array>(batch, &format!("a{i}_{suffix}"), DataType::Int64)
            };
            readers.push(AccColumns {
                count: int("count")?,
                int: int("int")?,
                float: named::<Float64Array>(batch, &format!("a{i}_float"), DataType::Float64)?,
                time: match b.timed() {
                    true => Some(int("time")?),
                    false => None,
                },
                set: match b.set {
                    Some(_) => Some(named::<BinaryArray>(
                        batch,
                        &format!("a{i}_set"),
                        DataType::Binary,
                    )?),
                    None => None,
                },
                extreme: match b.extreme {
                    Some(_) => Some(named::<BinaryArray>(
                        batch,
                        &format!("a{i}_value"),
                        DataType::Binary,
                    )?),
                    None => None,
                },
            });
        }
        Ok(GroupReader {
            readers,
            sets: self.sets,
            extremes: self.extremes,
        })
    }
}

/// The accumulators of a window's (or a key's) group, as state-table
/// values: one snapshot row per group.
#[derive(Debug, Clone)]
pub struct GroupCodec(pub Aggregates);

impl ValueCodec for GroupCodec {
    type Value = GroupAccs;

    fn fields(&self) -> Vec<Field> {
        self.0.snapshot_fields()
    }

    fn encode(&self, values: &[&GroupAccs]) -> Result<ValueRows, StateError> {
        Ok((self.0.snapshot_columns(values), vec![1; values.len()]))
    }

    fn decode(&self, batch: &RecordBatch, rows: &[usize]) -> Result<Vec<GroupAccs>, StateError> {
        let reader = self.0.reader(batch)?;
        rows.iter().map(|&r| reader.row(r)).collect()
    }

    fn merge(&self, into: &mut GroupAccs, more: GroupAccs) {
        self.0.merge(into, &more);
    }

    fn heap_size(&self, group: &GroupAccs) -> usize {
        group.heap_size()
    }
}

impl GroupAccs {
    /// Bytes the group holds on the heap, about.
    pub fn heap_size(&self) -> usize {
        use super::rows::allocation;
        let sets: usize = self
            .sets
            .iter()
            .map(|set| {
                // hashbrown: a slot per bucket (buckets ≥ 8/7 of the
                // capacity) plus a control byte, and each value's bytes.
                let slots = set.capacity() * 8 / 7;
                slots * (std::mem::size_of::<Box<[u8]>>() + 1)
                    + set.iter().map(|v| allocation(v.len())).sum::<usize>()
            })
            .sum();
        let extremes: usize = self
            .extremes
            .iter()
            .map(|e| e.as_ref().map_or(0, |v| allocation(v.len())))
            .sum();
        allocation(self.accs.capacity() * std::mem::size_of::<Acc>())
            + allocation(self.sets.capacity() * std::mem::size_of::<HashSet<Box<[u8]>>>())
            + allocation(self.extremes.capacity() * std::mem::size_of::<Option<Box<[u8]>>>())
            + sets
            + extremes
    }
}

fn fold_one(function: AggregateFn, acc: &mut Acc, int: Option<i64>, float: f64, t: i64) {
    let first = acc.count == 0;
    match function {
        AggregateFn::Count | AggregateFn::CountDistinct => {}
        AggregateFn::Sum | AggregateFn::Avg => {
            if let Some(v) = int {
                acc.int = acc.int.wrapping_add(v);
            }
            acc.float += float;
        }
        AggregateFn::Min | AggregateFn::Max => {
            let min = function == AggregateFn::Min;
            match int {
                Some(v) => {
                    acc.int = match (first, min) {
                        (true, _) => v,
                        (_, true) => acc.int.min(v),
                        (_, false) => acc.int.max(v),
                    }
                }
                None => {
                    acc.float = match (first, min) {
                        (true, _) => float,
                        (_, true) => acc.float.min(float),
                        (_, false) => acc.float.max(float),
                    }
                }
            }
        }
        AggregateFn::FirstValue | AggregateFn::LastValue => {
            // The earliest (latest) time wins; at equal times the smaller
            // (larger) value: the same result in any arrival order.
            let order = t.cmp(&acc.time).then(match int {
                Some(v) => v.cmp(&acc.int),
                None => float.total_cmp(&acc.float),
            });
            let wins = match function {
                AggregateFn::FirstValue => order.is_lt(),
                _ => order.is_gt(),
            };
            if first || wins {
                acc.int = int.unwrap_or(0);
                acc.float = float;
                acc.time = t;
            }
        }
    }
    acc.count += 1;
}

/// One aggregate's snapshot columns.
struct AccColumns<'b> {
    count: &'b Int64Array,
    int: &'b Int64Array,
    float: &'b Float64Array,
    time: Option<&'b Int64Array>,
    set: Option<&'b BinaryArray>,
    extreme: Option<&'b BinaryArray>,
}

/// Reads [`GroupAccs`] back from a snapshot.
pub struct GroupReader<'b> {
    readers: Vec<AccColumns<'b>>,
    sets: usize,
    extremes: usize,
}

impl GroupReader<'_> {
    /// The group of snapshot row `row`.
    pub fn row(&self, row: usize) -> Result<GroupAccs, StateError> {
        let mut group = GroupAccs {
            accs: Vec::with_capacity(self.readers.len()),
            sets: Vec::with_capacity(self.sets),
            extremes: Vec::with_capacity(self.extremes),
        };
        for r in &self.readers {
            group.accs.push(Acc {
                count: r.count.value(row),
                int: r.int.value(row),
                float: r.float.value(row),
                time: r.time.map_or(0, |t| t.value(row)),
            });
            if let Some(set) = r.set {
                group.sets.push(decode_set(set.value(row))?);
            }
            if let Some(values) = r.extreme {
                group
                    .extremes
                    .push(values.is_valid(row).then(|| values.value(row).into()));
            }
        }
        Ok(group)
    }
}

/// Keep `value` in `slot` if it is the new minimum (`min`) or maximum.
fn keep_extreme(function: AggregateFn, slot: &mut Option<Box<[u8]>>, value: &[u8]) {
    let better = match slot.as_deref() {
        None => true,
        Some(held) if function == AggregateFn::Min => value < held,
        Some(held) => value > held,
    };
    if better {
        *slot = Some(value.into());
    }
}

/// The column of row-encoded values of type `t` (null where absent).
fn decode_extremes<'a>(t: &DataType, values: impl Iterator<Item = Option<&'a [u8]>>) -> ArrayRef {
    let decoded = RowConverter::new(vec![SortField::new(t.clone())]).and_then(|converter| {
        let null = converter.convert_columns(&[arrow::array::new_null_array(t, 1)])?;
        let parser = converter.parser();
        let rows: Vec<_> = values
            .map(|v| parser.parse(v.unwrap_or_else(|| null.row(0).data())))
            .collect();
        converter.convert_rows(rows)
    });
    match decoded {
        Ok(mut columns) if columns.len() == 1 => columns.remove(0),
        // Checked at bind: the type has a row encoding.
        _ => arrow::array::new_null_array(t, 0),
    }
}

/// A set of values as `len (u32 LE) bytes` repeated, in sorted order (so a
/// snapshot's bytes do not depend on hashing).
fn encode_set(set: &HashSet<Box<[u8]>>) -> Vec<u8> {
    let mut values: Vec<&Box<[u8]>> = set.iter().collect();
    values.sort_unstable();
    let mut out = Vec::new();
    for v in values {
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    out
}

fn decode_set(mut bytes: &[u8]) -> Result<HashSet<Box<[u8]>>, StateError> {
    let mut set = HashSet::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes.split_first_chunk::<4>().ok_or_else(truncated)?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err(truncated());
        }
        set.insert(rest[..len].into());
        bytes = &rest[len..];
    }
    Ok(set)
}

fn truncated() -> StateError {
    StateError::Value("a distinct-count set is truncated".into())
}

fn downcast<T: 'static>(a: &ArrayRef) -> Result<&T, ArrowError> {
    a.as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| ArrowError::CastError("unexpected array type after cast".into()))
}

/// `a, b, c` for messages.
pub fn column_names(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
