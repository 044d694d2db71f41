//! Row groups that a scan's filters rule out by their column-chunk
//! statistics (min, max, null count), so they are never read.
//!
//! Filters are hints (the host applies them again), so a group is skipped
//! only when its statistics *prove* that no row satisfies some filter;
//! anything uncertain is read. What is used:
//! - an `Int` literal against an Int64 column with INT64 statistics, a
//!   `Text` literal against a Utf8 column with BYTE_ARRAY statistics in
//!   the type-defined (unsigned byte-wise) order — not the deprecated
//!   signed `min`/`max` of old writers — and a `Float` literal against a
//!   Float64 column with DOUBLE statistics, `=` only: statistics leave NaN
//!   out, and NaN compares above (or, negative, below) every number in
//!   Arrow's total order, so only equality to a number is decided by them;
//! - a group whose column is null in every row fails any comparison.
//!
//! Truncated string bounds are still bounds (the minimum is a prefix, the
//! maximum rounded up), so only `<>` needs exact ones.
//!
//! [`bounds_rule_out`] decides on the [`Bounds`] of any run of rows: the
//! page index (`parquet_pages.rs`) uses it for the pages of a group.

use std::cmp::Ordering;

use fv_plugin_sdk::arrow_schema::{DataType, Schema};
use fv_plugin_sdk::{Comparison, Filter, Literal};
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::statistics::Statistics;
use parquet::schema::types::SchemaDescriptor;

/// What statistics tell of one column's values in some rows (a row
/// group's, or a page's; see `parquet_pages.rs`).
#[derive(Debug, Clone, Copy)]
pub enum Bounds<'a> {
    /// Every value is null.
    AllNull,
    /// INT64 values in `[min, max]` (`exact`: both bounds are values).
    Int64 { min: i64, max: i64, exact: bool },
    /// BYTE_ARRAY values in `[min, max]` in unsigned byte-wise order (the
    /// type-defined order of UTF-8 strings).
    Bytes {
        min: &'a [u8],
        max: &'a [u8],
        exact: bool,
    },
    /// DOUBLE values other than NaN in `[min, max]`.
    Double { min: f64, max: f64 },
}

/// Whether the statistics of `group` prove that none of its rows satisfies
/// all of `filters` (`schema`: the file's full Arrow schema).
pub fn rules_out(group: &RowGroupMetaData, schema: &Schema, filters: &[Filter]) -> bool {
    filters.iter().any(|f| filter_rules_out(group, schema, f))
}

/// The leaf column of the top-level primitive field `name`: its path is
/// its name.
pub fn leaf_column(schema: &SchemaDescriptor, name: &str) -> Option<usize> {
    schema
        .columns()
        .iter()
        .position(|c| matches!(c.path().parts(), [only] if only == name))
}

fn filter_rules_out(group: &RowGroupMetaData, schema: &Schema, filter: &Filter) -> bool {
    let Ok(field) = schema.field_with_name(&filter.column) else {
        return false;
    };
    let Some(leaf) = leaf_column(group.schema_descr(), &filter.column) else {
        return false;
    };
    let Some(stats) = group.column(leaf).statistics() else {
        return false;
    };
    let rows = u64::try_from(group.num_rows()).unwrap_or(0);
    let exact = stats.min_is_exact() && stats.max_is_exact();
    let bounds = if rows > 0 && stats.null_count_opt() == Some(rows) {
        Some(Bounds::AllNull)
    } else {
        match stats {
            Statistics::Int64(s) => s.min_opt().zip(s.max_opt()).map(|(lo, hi)| Bounds::Int64 {
                min: *lo,
                max: *hi,
                exact,
            }),
            Statistics::ByteArray(_) if !stats.is_min_max_deprecated() => stats
                .min_bytes_opt()
                .zip(stats.max_bytes_opt())
                .map(|(min, max)| Bounds::Bytes { min, max, exact }),
            Statistics::Double(s) => s
                .min_opt()
                .zip(s.max_opt())
                .map(|(lo, hi)| Bounds::Double { min: *lo, max: *hi }),
            _ => None,
        }
    };
    bounds.is_some_and(|b| bounds_rule_out(field.data_type(), filter, &b))
}

/// Whether no value within `bounds`, of a column of Arrow type
/// `data_type`, satisfies `filter` (null compares to nothing).
pub fn bounds_rule_out(data_type: &DataType, filter: &Filter, bounds: &Bounds<'_>) -> bool {
    match (data_type, &filter.value, *bounds) {
        (_, _, Bounds::AllNull) => true,
        (DataType::Int64, Literal::Int(v), Bounds::Int64 { min, max, exact }) => {
            outside(filter.op, min.cmp(v), max.cmp(v), exact)
        }
        (DataType::Utf8, Literal::Text(v), Bounds::Bytes { min, max, exact }) => {
            let v = v.as_bytes();
            outside(filter.op, min.cmp(v), max.cmp(v), exact)
        }
        (DataType::Float64, Literal::Float(v), Bounds::Double { min, max })
            if filter.op == Comparison::Eq && !v.is_nan() && !min.is_nan() && !max.is_nan() =>
        {
            // Numeric (IEEE) order, where -0 = +0: a writer may have
            // recorded either zero as a bound.
            let (lo, hi) = (min.partial_cmp(v), max.partial_cmp(v));
            lo == Some(Ordering::Greater) || hi == Some(Ordering::Less)
        }
        _ => false,
    }
}

/// Whether every value in `[lo, hi]` fails `value op literal`, given how
/// the bounds compare to the literal (`exact`: the bounds are values).
fn outside(op: Comparison, lo: Ordering, hi: Ordering, exact: bool) -> bool {
    use Ordering::{Equal, Greater, Less};
    match op {
        Comparison::Eq => lo == Greater || hi == Less,
        Comparison::NotEq => exact && lo == Equal && hi == Equal,
        Comparison::Lt => lo != Less,
        Comparison::LtEq => lo == Greater,
        Comparison::Gt => hi != Greater,
        Comparison::GtEq => hi == Less,
    }
}

#[cfg(test)]
mod tests {
    use super::outside;
    use fv_plugin_sdk::Comparison::*;
    use std::cmp::Ordering::*;

    #[test]
    fn bounds_rule_out_only_what_they_prove() {
        // Values in [10, 20] against literal 5 (both bounds above it).
        assert!(outside(Eq, Greater, Greater, true));
        assert!(outside(Lt, Greater, Greater, true));
        assert!(outside(LtEq, Greater, Greater, true));
        assert!(!outside(Gt, Greater, Greater, true));
        assert!(!outside(GtEq, Greater, Greater, true));
        assert!(!outside(NotEq, Greater, Greater, true));
        // Literal 10 = the minimum: `< 10` impossible, `<= 10` possible.
        assert!(outside(Lt, Equal, Greater, true));
        assert!(!outside(LtEq, Equal, Greater, true));
        // Literal 20 = the maximum: `> 20` impossible, `>= 20` possible.
        assert!(outside(Gt, Less, Equal, true));
        assert!(!outside(GtEq, Less, Equal, true));
        // Every value is 7: only `<> 7` is impossible, and only when the
        // bounds are exact values.
        assert!(outside(NotEq, Equal, Equal, true));
        assert!(!outside(NotEq, Equal, Equal, false));
        assert!(!outside(Eq, Equal, Equal, true));
    }
}
