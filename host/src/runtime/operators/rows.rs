//! What the stateful operators share: event times read as microseconds,
//! whole rows kept as Arrow row-format bytes (compact, hashable, ordered,
//! snapshotted as one binary column) and decoded back into columns, the
//! watermark a snapshot carries, the gauge of state held, and a batch's
//! rows grouped by key (so a keyed operator looks each key up once).
//!
//! Nothing here decides semantics (which rows meet, when state fires):
//! that stays in each operator's file.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow::array::{Array, ArrayRef, RecordBatch, TimestampMicrosecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Schema, SchemaRef, TimeUnit};
use arrow::error::ArrowError;
use arrow::row::{RowConverter, Rows, SortField};

use crate::runtime::message::Watermark;
use crate::runtime::metrics::StageMetrics;
use crate::runtime::operator::Emitter;

/// Rows per output batch of an operator that emits held state (a window
/// firing, join pairs).
pub const OUTPUT_BATCH: usize = 8192;

/// A duration as a state format writes it: whole milliseconds as `…ms`,
/// else microseconds as `…us` (exact, and as the topology reads).
pub(crate) fn format_duration(d: std::time::Duration) -> String {
    let us = d.as_micros();
    match us % 1000 {
        0 => format!("{}ms", us / 1000),
        _ => format!("{us}us"),
    }
}

/// Schema metadata key of the watermark a snapshot was taken at.
pub const WATERMARK_KEY: &str = "fvhost.watermark";

/// Column `column` of `batch` as microsecond timestamps.
pub fn event_micros(
    batch: &RecordBatch,
    column: usize,
) -> Result<TimestampMicrosecondArray, ArrowError> {
    let times = cast(
        batch.column(column),
        &DataType::Timestamp(TimeUnit::Microsecond, None),
    )?;
    times
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .cloned()
        .ok_or_else(|| ArrowError::CastError("event time did not cast to microseconds".into()))
}

/// Whole rows of one schema as bytes, optionally prefixed by sort columns
/// so that byte order is the ranking order.
#[derive(Debug)]
pub struct RowCodec {
    converter: RowConverter,
    /// Columns encoded before the row itself (the ranking prefix).
    prefix: Vec<usize>,
}

impl RowCodec {
    /// Rows of `schema`, compared column by column ascending.
    pub fn new(schema: SchemaRef) -> Result<Self, ArrowError> {
        Self::ranked(schema, &[])
    }

    /// Rows of `schema` whose byte order is `order` (column, descending)
    /// first, then every column ascending (so ties break the same way in
    /// every run, whatever the arrival order).
    pub fn ranked(schema: SchemaRef, order: &[(usize, bool)]) -> Result<Self, ArrowError> {
        let mut fields: Vec<SortField> = order
            .iter()
            .map(|(i, desc)| {
                SortField::new_with_options(
                    schema.field(*i).data_type().clone(),
                    arrow::compute::SortOptions {
                        descending: *desc,
                        nulls_first: !*desc,
                    },
                )
            })
            .collect();
        fields.extend(
            schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone())),
        );
        Ok(RowCodec {
            converter: RowConverter::new(fields)?,
            prefix: order.iter().map(|(i, _)| *i).collect(),
        })
    }

    /// The rows of `batch`.
    pub fn encode(&self, batch: &RecordBatch) -> Result<Rows, ArrowError> {
        let mut columns: Vec<ArrayRef> = self
            .prefix
            .iter()
            .map(|i| Arc::clone(batch.column(*i)))
            .collect();
        columns.extend(batch.columns().iter().cloned());
        self.converter.convert_columns(&columns)
    }

    /// The columns of `rows` (bytes from [`RowCodec::encode`]).
    pub fn decode<'a>(
        &self,
        rows: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Vec<ArrayRef>, ArrowError> {
        let parser = self.converter.parser();
        let mut columns = self
            .converter
            .convert_rows(rows.into_iter().map(|r| parser.parse(r)))?;
        Ok(columns.split_off(self.prefix.len()))
    }
}

/// `schema` carrying `watermark` in its metadata.
pub fn with_watermark(schema: Schema, watermark: Option<i64>) -> SchemaRef {
    let mut metadata = HashMap::new();
    if let Some(w) = watermark {
        metadata.insert(WATERMARK_KEY.to_string(), w.to_string());
    }
    Arc::new(schema.with_metadata(metadata))
}

/// The watermark a snapshot batch was taken at (`None`: its task had seen
/// none).
pub fn saved_watermark(batch: &RecordBatch) -> Option<i64> {
    batch
        .schema()
        .metadata()
        .get(WATERMARK_KEY)
        .and_then(|w| w.parse::<i64>().ok())
}

/// Move `current` forward to `watermark`: the new time if it advanced
/// (watermarks never regress; idleness carries no time).
pub fn advance(current: &mut Option<i64>, watermark: Watermark) -> Option<i64> {
    match watermark {
        Watermark::At(w) if current.is_none_or(|old| w > old) => {
            *current = Some(w);
            Some(w)
        }
        _ => None,
    }
}

/// The watermark a stage forwards after firing at `watermark`: held back by
/// `hold` microseconds, so that rows it emits later (a window kept open by
/// allowed lateness, a join partner still buffered) are not late downstream.
pub fn held_back(watermark: Watermark, hold: i64) -> Watermark {
    match watermark {
        Watermark::At(w) if w != i64::MAX => Watermark::At(w.saturating_sub(hold)),
        other => other,
    }
}

/// The stage's `state_groups` gauge, fed by one task.
#[derive(Debug, Default)]
pub struct StateGauge {
    reported: u64,
}

impl StateGauge {
    /// Report that the task now holds `now` groups (or rows).
    pub fn report(&mut self, now: u64, out: &Emitter) {
        if now >= self.reported {
            StageMetrics::add(&out.metrics.state_groups, now - self.reported);
        } else {
            out.metrics
                .state_groups
                .fetch_sub(self.reported - now, Ordering::Relaxed);
        }
        self.reported = now;
    }
}

/// `fields`, each nullable when `missing` (the columns of a side a row may
/// lack: a left lookup's table, the side an outer join does not keep),
/// else as they are.
pub fn nullable_when<'a>(
    fields: impl IntoIterator<Item = &'a arrow::datatypes::FieldRef>,
    missing: bool,
) -> Vec<arrow::datatypes::FieldRef> {
    fields
        .into_iter()
        .map(|f| match missing && !f.is_nullable() {
            true => Arc::new(f.as_ref().clone().with_nullable(true)),
            false => Arc::clone(f),
        })
        .collect()
}

/// Columns of `input` renamed where they collide with `taken`:
/// `{prefix}_{name}` (a join's right side, a lookup's table).
pub fn disambiguate(
    input: &Schema,
    taken: &[String],
    prefix: &str,
) -> Vec<arrow::datatypes::FieldRef> {
    input
        .fields()
        .iter()
        .map(|f| {
            if taken.iter().any(|t| t == f.name()) {
                Arc::new(
                    f.as_ref()
                        .clone()
                        .with_name(format!("{prefix}_{}", f.name())),
                )
            } else {
                Arc::clone(f)
            }
        })
        .collect()
}

/// A setting's error: (key under the stage, message).
pub type SettingError = (String, String);

/// The index of column `name` of `input`, or an error on `field` listing
/// the columns there are.
pub fn find_column(input: &Schema, field: &str, name: &str) -> Result<usize, SettingError> {
    input.index_of(name).map_err(|_| {
        (
            field.to_string(),
            format!(
                "no column `{name}` in the input (columns: {})",
                super::aggregates::column_names(input)
            ),
        )
    })
}

/// Like [`find_column`], and the column must be a timestamp.
pub fn event_time_column(input: &Schema, field: &str, name: &str) -> Result<usize, SettingError> {
    let i = find_column(input, field, name)?;
    match input.field(i).data_type() {
        DataType::Timestamp(_, _) => Ok(i),
        other => Err((
            field.to_string(),
            format!("`{name}` is {other}; the event-time column must be a timestamp"),
        )),
    }
}

/// The output of a keyed aggregation (windows, sessions): the event-time
/// column's index, then `window_start`, `window_end`, the key columns and
/// one column per aggregate; and the aggregates bound to `input`. Also
/// checks that the key columns can be hashed.
pub fn keyed_aggregation(
    input: &SchemaRef,
    time: (&str, &str),
    key: &[String],
    aggregates: &[crate::topology::Aggregate],
) -> Result<
    (
        usize,
        Vec<arrow::datatypes::Field>,
        super::aggregates::Aggregates,
    ),
    SettingError,
> {
    use arrow::datatypes::Field;
    let time = event_time_column(input, time.0, time.1)?;
    let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
    let mut fields = vec![
        Field::new("window_start", ts.clone(), false),
        Field::new("window_end", ts, false),
    ];
    for k in key {
        fields.push(input.field(find_column(input, "key", k)?).clone());
    }
    let bound = super::aggregates::Aggregates::bind(aggregates, input)?;
    fields.extend(bound.fields());
    // Validate the key encoding once, here, rather than per task.
    crate::state::KeyHasher::new(input, key).map_err(|e| ("key".to_string(), e.to_string()))?;
    Ok((time, fields, bound))
}

/// A batch's rows grouped by key: each distinct key once, in the order
/// first seen, and its rows in row order.
pub struct RowsByKey<'a> {
    /// The distinct keys, in the order first seen.
    pub keys: Vec<&'a [u8]>,
    /// Rows of key `i`: `rows[starts[i]..starts[i + 1]]`.
    starts: Vec<u32>,
    rows: Vec<u32>,
}

impl<'a> RowsByKey<'a> {
    /// Group rows `0..n` by `key_of(row)`.
    pub fn of(n: usize, key_of: impl Fn(usize) -> &'a [u8]) -> Self {
        let mut index: HashMap<&'a [u8], u32, foldhash::fast::RandomState> = HashMap::default();
        let mut keys: Vec<&'a [u8]> = Vec::new();
        let mut of_row: Vec<u32> = Vec::with_capacity(n);
        for row in 0..n {
            let key = key_of(row);
            let next = keys.len() as u32;
            let id = *index.entry(key).or_insert_with(|| {
                keys.push(key);
                next
            });
            of_row.push(id);
        }
        // A counting sort of the rows by key id: stable, so each key's
        // rows stay in row order (first/last values depend on it).
        let mut starts = vec![0u32; keys.len() + 1];
        for &id in &of_row {
            starts[id as usize + 1] += 1;
        }
        for i in 0..keys.len() {
            starts[i + 1] += starts[i];
        }
        let mut next = starts.clone();
        let mut rows = vec![0u32; n];
        for (row, &id) in of_row.iter().enumerate() {
            rows[next[id as usize] as usize] = row as u32;
            next[id as usize] += 1;
        }
        RowsByKey { keys, starts, rows }
    }

    /// Each key with its rows, keys in byte order.
    pub fn in_key_order(&self) -> impl Iterator<Item = (&'a [u8], &[u32])> {
        let mut order: Vec<usize> = (0..self.keys.len()).collect();
        order.sort_unstable_by_key(|&i| self.keys[i]);
        order.into_iter().map(|i| {
            let (from, to) = (self.starts[i] as usize, self.starts[i + 1] as usize);
            (self.keys[i], &self.rows[from..to])
        })
    }
}

/// Bytes a heap allocation of `len` bytes takes, about (allocators round
/// small sizes up to classes of 16 bytes).
pub fn allocation(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        len.next_multiple_of(16)
    }
}

/// Bytes `rows` (a list of encoded rows) holds on the heap, about.
pub fn rows_heap_size(rows: &[Box<[u8]>], capacity: usize) -> usize {
    allocation(capacity * std::mem::size_of::<Box<[u8]>>())
        + rows.iter().map(|r| allocation(r.len())).sum::<usize>()
}
