//! Joins of two inputs — [`WindowJoin`] (both rows in the same tumbling
//! window, Nexmark q8) and [`IntervalJoin`] (right rows within
//! `[left + lower, left + upper]`, or any time for an unbounded join) —
//! and the [`JoinPlan`] they
//! share: key columns per side (equal types, so both sides hash a key to
//! the same vnode and the same task), event-time columns, whole rows kept
//! as row-format bytes, and the output schema (left columns, then right
//! columns, renamed `<right input>_<column>` where names collide).

mod interval;
mod window;

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::error::ArrowError;

pub use interval::IntervalJoin;
pub use window::WindowJoin;

use super::rows::{RowCodec, disambiguate, format_duration, nullable_when};
use super::window::column_names;
use crate::state::KeyHasher;
use crate::state::StateFormat;
use crate::topology::{JoinOuter, JoinSpec, JoinWindow};

/// The columns a window join's rows start with: its window's bounds.
pub fn window_bound_fields() -> [Field; 2] {
    let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
    [
        Field::new("window_start", ts.clone(), false),
        Field::new("window_end", ts, false),
    ]
}

/// A join stage checked against its two input schemas.
#[derive(Debug, Clone)]
pub struct JoinPlan {
    spec: JoinSpec,
    inputs: [SchemaRef; 2],
    /// Event-time column per side (none in an unbounded join without one).
    time: [Option<usize>; 2],
    output: SchemaRef,
}

impl JoinPlan {
    /// Check `spec` against the left and right inputs (named, for renaming
    /// colliding right columns). The error names the setting at fault.
    pub fn new(
        spec: &JoinSpec,
        left: (&str, SchemaRef),
        right: (&str, SchemaRef),
    ) -> Result<Self, (String, String)> {
        let find = |schema: &SchemaRef, side: &str, field: &str, name: &str| {
            schema.index_of(name).map_err(|_| {
                (
                    field.to_string(),
                    format!(
                        "the {side} input has no column `{name}` (columns: {})",
                        column_names(schema)
                    ),
                )
            })
        };
        for (i, (l, r)) in spec.on.iter().enumerate() {
            let li = find(&left.1, "left", &format!("join.on.{i}"), l)?;
            let ri = find(&right.1, "right", &format!("join.on.{i}"), r)?;
            let (lt, rt) = (left.1.field(li).data_type(), right.1.field(ri).data_type());
            if lt != rt {
                return Err((
                    format!("join.on.{i}"),
                    format!(
                        "`{l}` is {lt} but `{r}` is {rt}; the key columns of a join must have the same type (cast one side in a SQL stage first)"
                    ),
                ));
            }
        }
        let mut time = [None; 2];
        for (side, (schema, name, label, field)) in [
            (&left.1, &spec.left_time, "left", "join.time"),
            (&right.1, &spec.right_time, "right", "join.right_time"),
        ]
        .into_iter()
        .enumerate()
        {
            // An unbounded join pairs rows whatever their times: it may
            // name no time column.
            if name.is_empty() && spec.window == JoinWindow::Unbounded {
                continue;
            }
            let i = find(schema, label, field, name)?;
            if !matches!(schema.field(i).data_type(), DataType::Timestamp(_, _)) {
                return Err((
                    field.to_string(),
                    format!(
                        "`{name}` of the {label} input is {}; the event-time column must be a timestamp",
                        schema.field(i).data_type()
                    ),
                ));
            }
            time[side] = Some(i);
        }
        let mut fields: Vec<Arc<Field>> = Vec::new();
        if matches!(spec.window, JoinWindow::Tumbling(_)) {
            fields.extend(window_bound_fields().map(Arc::new));
        }
        // A side's columns are null in the rows the other side keeps
        // without a match.
        let taken: Vec<String> = fields.iter().map(|f| f.name().clone()).collect();
        fields.extend(nullable_when(
            &disambiguate(&left.1, &taken, left.0),
            spec.outer.keeps(1),
        ));
        let taken: Vec<String> = fields.iter().map(|f| f.name().clone()).collect();
        fields.extend(nullable_when(
            &disambiguate(&right.1, &taken, right.0),
            spec.outer.keeps(0),
        ));
        let mut seen = std::collections::BTreeSet::new();
        for f in &fields {
            if !seen.insert(f.name().clone()) {
                return Err((
                    "input".into(),
                    format!(
                        "the joined rows would have two columns `{}`; rename one in a SQL stage before the join",
                        f.name()
                    ),
                ));
            }
        }
        for side in 0..2 {
            let schema = if side == 0 { &left.1 } else { &right.1 };
            KeyHasher::new(schema, &spec.key(side))
                .map_err(|e| ("join.on".to_string(), e.to_string()))?;
        }
        Ok(JoinPlan {
            spec: spec.clone(),
            inputs: [left.1, right.1],
            time,
            output: Arc::new(Schema::new(fields)),
        })
    }

    /// The joined rows.
    pub fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.output)
    }

    /// What the state means (the window and interval joins buffer rows
    /// alike, so one format names which it is).
    pub fn format(&self) -> StateFormat {
        let s = &self.spec;
        let on: Vec<String> = s.on.iter().map(|(l, r)| format!("{l}={r}")).collect();
        let mut format = StateFormat::new("join", 1)
            .setting("on", on.join(","))
            .setting("time", format!("{}/{}", s.left_time, s.right_time));
        if s.outer != JoinOuter::Inner {
            // Its rows carry whether they met one: not an inner join's.
            format = format.setting("outer", s.outer.name());
        }
        match s.window {
            JoinWindow::Tumbling(d) => format.setting("window", format_duration(d)),
            JoinWindow::Interval { lower, upper } => {
                format.setting("lower_us", lower).setting("upper_us", upper)
            }
            JoinWindow::Unbounded => format.setting("unbounded", true),
        }
        .or_legacy(s.describe())
    }

    /// Which rows meet.
    pub fn window(&self) -> JoinWindow {
        self.spec.window
    }

    /// Which rows without a match are kept.
    pub fn outer(&self) -> JoinOuter {
        self.spec.outer
    }

    /// Per side: the key hasher and the whole-row codec.
    fn sides(&self) -> Result<[JoinSide; 2], ArrowError> {
        let side = |i: usize| -> Result<JoinSide, ArrowError> {
            Ok(JoinSide {
                hasher: KeyHasher::new(&self.inputs[i], &self.spec.key(i))?,
                codec: RowCodec::new(Arc::clone(&self.inputs[i]))?,
                time: self.time[i],
            })
        };
        Ok([side(0)?, side(1)?])
    }
}

/// How one side's rows are keyed, timed and stored.
struct JoinSide {
    hasher: KeyHasher,
    codec: RowCodec,
    time: Option<usize>,
}

/// A batch of one side as the joins hold it: event times (all zero for a
/// side without a time column), keys, rows.
struct SideRows {
    times: arrow::array::TimestampMicrosecondArray,
    keys: arrow::row::Rows,
    rows: arrow::row::Rows,
}

impl JoinSide {
    /// `batch` of this side read for stage `ctx`.
    fn read(
        &self,
        batch: &RecordBatch,
        ctx: &crate::runtime::checkpoint::StateContext,
    ) -> Result<SideRows, crate::runtime::TaskError> {
        Ok(SideRows {
            times: match self.time {
                Some(column) => super::rows::event_micros(batch, column)
                    .map_err(ctx.arrow("reading event time"))?,
                None => arrow::array::TimestampMicrosecondArray::from(vec![0; batch.num_rows()]),
            },
            keys: self
                .hasher
                .rows(batch)
                .map_err(ctx.arrow("encoding keys"))?,
            rows: self
                .codec
                .encode(batch)
                .map_err(ctx.arrow("encoding rows"))?,
        })
    }
}

/// Build output batches from matched (left row, right row) byte pairs,
/// with window bounds in front for a window join.
fn joined(
    plan: &JoinPlan,
    sides: &[JoinSide; 2],
    window: Option<(i64, i64)>,
    pairs: &[(&[u8], &[u8])],
) -> Result<RecordBatch, ArrowError> {
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(plan.output.fields().len());
    if let Some((start, end)) = window {
        let n = pairs.len();
        columns.push(Arc::new(arrow::array::TimestampMicrosecondArray::from(
            vec![start; n],
        )));
        columns.push(Arc::new(arrow::array::TimestampMicrosecondArray::from(
            vec![end; n],
        )));
    }
    columns.extend(sides[0].codec.decode(pairs.iter().map(|(l, _)| *l))?);
    columns.extend(sides[1].codec.decode(pairs.iter().map(|(_, r)| *r))?);
    RecordBatch::try_new(plan.output_schema(), columns)
}

/// Build output batches from rows of `side` that met no row of the other
/// (an outer join's): the other side's columns null, with window bounds
/// in front for a window join.
fn unmatched(
    plan: &JoinPlan,
    sides: &[JoinSide; 2],
    window: Option<(i64, i64)>,
    side: usize,
    rows: &[&[u8]],
) -> Result<RecordBatch, ArrowError> {
    let n = rows.len();
    let output = plan.output_schema();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(output.fields().len());
    if let Some((start, end)) = window {
        columns.push(Arc::new(arrow::array::TimestampMicrosecondArray::from(
            vec![start; n],
        )));
        columns.push(Arc::new(arrow::array::TimestampMicrosecondArray::from(
            vec![end; n],
        )));
    }
    let left_columns = columns.len() + plan.inputs[0].fields().len();
    let nulls = |range: std::ops::Range<usize>| -> Vec<ArrayRef> {
        output.fields()[range]
            .iter()
            .map(|f| arrow::array::new_null_array(f.data_type(), n))
            .collect()
    };
    if side == 0 {
        columns.extend(sides[0].codec.decode(rows.iter().copied())?);
        columns.extend(nulls(left_columns..output.fields().len()));
    } else {
        columns.extend(nulls(columns.len()..left_columns));
        columns.extend(sides[1].codec.decode(rows.iter().copied())?);
    }
    RecordBatch::try_new(output, columns)
}
