//! Per-group accumulators of a window stage: what each aggregate function
//! keeps, how it folds a value in, and the Arrow type it emits.
//!
//! Values are folded as `i64` (integer inputs) or `f64` (float inputs), so
//! one fixed-width [`Acc`] serves every function and snapshots stay three
//! columns per aggregate.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::error::ArrowError;

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
pub struct BoundAggregate {
    /// The function.
    pub function: AggregateFn,
    /// Input column and its folding (`None` for `count(*)`).
    pub input: Option<(usize, Option<Numeric>)>,
    /// Output column name.
    pub alias: String,
}

impl BoundAggregate {
    /// Bind `a` to `schema`; the error says what is wrong with the column.
    pub fn bind(a: &Aggregate, schema: &Schema) -> Result<Self, String> {
        let input = match &a.column {
            None => None,
            Some(c) => {
                let i = schema.index_of(c).map_err(|_| {
                    format!(
                        "no column `{c}` in the input (columns: {})",
                        column_names(schema)
                    )
                })?;
                let t = schema.field(i).data_type();
                let numeric = Numeric::of(t);
                if numeric.is_none() && a.function != AggregateFn::Count {
                    return Err(
                        format!("`{c}` is {t}; {:?} needs a numeric column", a.function)
                            .to_lowercase(),
                    );
                }
                Some((i, numeric))
            }
        };
        Ok(BoundAggregate {
            function: a.function,
            input,
            alias: a.alias.clone(),
        })
    }

    /// The output field.
    pub fn field(&self) -> Field {
        let t = match (self.function, self.input) {
            (AggregateFn::Count, _) => return Field::new(&self.alias, DataType::Int64, false),
            (AggregateFn::Avg, _) => DataType::Float64,
            (_, Some((_, Some(Numeric::Int)))) => DataType::Int64,
            _ => DataType::Float64,
        };
        Field::new(&self.alias, t, true)
    }

    /// The input column of a batch, cast for folding.
    pub fn values(&self, columns: &[ArrayRef]) -> Result<Values, ArrowError> {
        Ok(match self.input {
            None => Values::Rows,
            Some((i, None)) => Values::Present(Arc::clone(&columns[i])),
            Some((i, Some(Numeric::Int))) => {
                let a = cast(&columns[i], &DataType::Int64)?;
                Values::Int(downcast::<Int64Array>(&a)?.clone())
            }
            Some((i, Some(Numeric::Float))) => {
                let a = cast(&columns[i], &DataType::Float64)?;
                Values::Float(downcast::<Float64Array>(&a)?.clone())
            }
        })
    }

    /// Fold row `row` of `values` into `acc`.
    pub fn fold(&self, acc: &mut Acc, values: &Values, row: usize) {
        match values {
            Values::Rows => acc.count += 1,
            Values::Present(a) => acc.count += i64::from(a.is_valid(row)),
            Values::Int(a) => {
                if a.is_valid(row) {
                    let v = a.value(row);
                    acc.int = match (self.function, acc.count) {
                        (AggregateFn::Min, 0) | (AggregateFn::Max, 0) => v,
                        (AggregateFn::Min, _) => acc.int.min(v),
                        (AggregateFn::Max, _) => acc.int.max(v),
                        _ => acc.int.wrapping_add(v),
                    };
                    acc.float += v as f64;
                    acc.count += 1;
                }
            }
            Values::Float(a) => {
                if a.is_valid(row) {
                    let v = a.value(row);
                    acc.float = match (self.function, acc.count) {
                        (AggregateFn::Min, 0) | (AggregateFn::Max, 0) => v,
                        (AggregateFn::Min, _) => acc.float.min(v),
                        (AggregateFn::Max, _) => acc.float.max(v),
                        _ => acc.float + v,
                    };
                    acc.count += 1;
                }
            }
        }
    }

    /// Fold `b` into `a` (sessions merging).
    pub fn merge(&self, a: &mut Acc, b: &Acc) {
        if b.count == 0 {
            return;
        }
        let int = matches!(self.input, Some((_, Some(Numeric::Int))));
        match self.function {
            AggregateFn::Count => {}
            AggregateFn::Min | AggregateFn::Max => {
                let min = self.function == AggregateFn::Min;
                if int {
                    a.int = match (a.count, min) {
                        (0, _) => b.int,
                        (_, true) => a.int.min(b.int),
                        (_, false) => a.int.max(b.int),
                    };
                    a.float += b.float;
                } else {
                    a.float = match (a.count, min) {
                        (0, _) => b.float,
                        (_, true) => a.float.min(b.float),
                        (_, false) => a.float.max(b.float),
                    };
                }
            }
            AggregateFn::Sum | AggregateFn::Avg => {
                a.int = a.int.wrapping_add(b.int);
                a.float += b.float;
            }
        }
        a.count += b.count;
    }

    /// The output column for `accs`.
    pub fn finish(&self, accs: impl Iterator<Item = Acc>) -> ArrayRef {
        let int = matches!(self.input, Some((_, Some(Numeric::Int))));
        match self.function {
            AggregateFn::Count => Arc::new(Int64Array::from_iter_values(accs.map(|a| a.count))),
            AggregateFn::Avg => Arc::new(Float64Array::from_iter(
                accs.map(|a| (a.count > 0).then(|| a.float / a.count as f64)),
            )),
            _ if int => Arc::new(Int64Array::from_iter(
                accs.map(|a| (a.count > 0).then_some(a.int)),
            )),
            _ => Arc::new(Float64Array::from_iter(
                accs.map(|a| (a.count > 0).then_some(a.float)),
            )),
        }
    }
}

/// An aggregate's input column of one batch, ready to fold.
pub enum Values {
    /// `count(*)`: every row counts.
    Rows,
    /// `count(col)` of a non-numeric column: non-null rows count.
    Present(ArrayRef),
    /// Integers.
    Int(Int64Array),
    /// Floats.
    Float(Float64Array),
}

/// The running value of one aggregate for one group. `count` is the number
/// of values folded (rows for `count(*)`); `int`/`float` hold the sum, min
/// or max (for integer inputs `float` is the sum, used by `avg`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Acc {
    /// Values folded.
    pub count: i64,
    /// Integer sum/min/max.
    pub int: i64,
    /// Float sum/min/max (or the float sum of integers).
    pub float: f64,
}

/// The snapshot fields of `n` aggregates: three per aggregate.
pub fn acc_fields(n: usize) -> Vec<Field> {
    (0..n)
        .flat_map(|i| {
            [
                Field::new(format!("a{i}_count"), DataType::Int64, false),
                Field::new(format!("a{i}_int"), DataType::Int64, false),
                Field::new(format!("a{i}_float"), DataType::Float64, false),
            ]
        })
        .collect()
}

/// The snapshot columns of `groups` (each `n` accumulators).
pub fn acc_columns<'a>(n: usize, groups: impl Iterator<Item = &'a [Acc]>) -> Vec<ArrayRef> {
    let mut by_agg: Vec<Vec<Acc>> = vec![Vec::new(); n];
    for accs in groups {
        for (a, acc) in accs.iter().enumerate() {
            by_agg[a].push(*acc);
        }
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(3 * n);
    for a in &by_agg {
        columns.push(Arc::new(Int64Array::from_iter_values(
            a.iter().map(|x| x.count),
        )));
        columns.push(Arc::new(Int64Array::from_iter_values(
            a.iter().map(|x| x.int),
        )));
        columns.push(Arc::new(Float64Array::from_iter_values(
            a.iter().map(|x| x.float),
        )));
    }
    columns
}

/// Reads accumulators back from snapshot columns.
pub struct AccReader<'a> {
    columns: Vec<(&'a Int64Array, &'a Int64Array, &'a Float64Array)>,
}

impl<'a> AccReader<'a> {
    /// The `n` aggregates whose columns start at `first` in `batch`.
    pub fn new(
        batch: &'a arrow::array::RecordBatch,
        first: usize,
        n: usize,
    ) -> Result<Self, String> {
        if batch.num_columns() != first + 3 * n {
            return Err(format!(
                "{} columns, expected {} for {n} aggregates",
                batch.num_columns(),
                first + 3 * n
            ));
        }
        let col = |i: usize| batch.column(i).as_any();
        let bad = || "unexpected accumulator column types".to_string();
        let mut columns = Vec::with_capacity(n);
        for a in 0..n {
            let c = first + 3 * a;
            columns.push((
                col(c).downcast_ref::<Int64Array>().ok_or_else(bad)?,
                col(c + 1).downcast_ref::<Int64Array>().ok_or_else(bad)?,
                col(c + 2).downcast_ref::<Float64Array>().ok_or_else(bad)?,
            ));
        }
        Ok(AccReader { columns })
    }

    /// The accumulators of row `row`.
    pub fn row(&self, row: usize) -> Vec<Acc> {
        self.columns
            .iter()
            .map(|(c, i, f)| Acc {
                count: c.value(row),
                int: i.value(row),
                float: f.value(row),
            })
            .collect()
    }
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
