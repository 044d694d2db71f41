//! Rows inside a row group that a scan's filters rule out by the page
//! index: the column index gives each data page's min, max and whether it
//! is all null, the offset index the group row each page starts at.
//!
//! The decision per page is the row groups' one
//! ([`parquet_prune::bounds_rule_out`]), on the same literal and column
//! types. A row is ruled out when the page holding it, in the column of
//! ANY filter, is (filters are a conjunction). Anything the index does not
//! describe in full (no index for the column, a column order other than
//! the type-defined one for strings, inconsistent page starts) rules
//! nothing out.

use std::ops::Range;

use fv_plugin_sdk::Filter;
use fv_plugin_sdk::arrow_schema::Schema;
use parquet::basic::{ColumnOrder, SortOrder};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::page_index::column_index::ColumnIndexMetaData;

use crate::parquet_prune::{self, Bounds};
use crate::parquet_select;

/// The rows of row group `group` whose pages rule out some filter, as
/// sorted, disjoint, non-empty ranges of row numbers within the group.
/// Empty when the file's page index was not read.
pub fn ruled_out(
    metadata: &ParquetMetaData,
    group: usize,
    schema: &Schema,
    filters: &[Filter],
) -> Vec<Range<u64>> {
    parquet_select::merged(
        filters
            .iter()
            .flat_map(|f| filter_ruled_out(metadata, group, schema, f))
            .collect(),
    )
}

/// The row ranges of the pages (of `filter`'s column in `group`) whose
/// statistics rule `filter` out.
fn filter_ruled_out(
    metadata: &ParquetMetaData,
    group: usize,
    schema: &Schema,
    filter: &Filter,
) -> Vec<Range<u64>> {
    let Ok(field) = schema.field_with_name(&filter.column) else {
        return Vec::new();
    };
    let descr = metadata.file_metadata().schema_descr();
    let Some(leaf) = parquet_prune::leaf_column(descr, &filter.column) else {
        return Vec::new();
    };
    let (Some(index), Some(offsets), Some(meta)) = (
        metadata
            .column_index()
            .and_then(|i| i.get(group))
            .and_then(|g| g.get(leaf)),
        metadata
            .offset_index()
            .and_then(|i| i.get(group))
            .and_then(|g| g.get(leaf)),
        metadata.row_groups().get(group),
    ) else {
        return Vec::new();
    };
    let rows = u64::try_from(meta.num_rows()).unwrap_or(0);
    let Some(pages) = page_rows(
        offsets.page_locations().iter().map(|p| p.first_row_index),
        rows,
    ) else {
        return Vec::new();
    };
    let unsigned = matches!(
        metadata
            .file_metadata()
            .column_orders()
            .and_then(|o| o.get(leaf)),
        Some(ColumnOrder::TYPE_DEFINED_ORDER(SortOrder::UNSIGNED))
    );
    let Some(bounds) = page_bounds(index, unsigned) else {
        return Vec::new();
    };
    if bounds.len() != pages.len() {
        return Vec::new();
    }
    pages
        .into_iter()
        .zip(bounds)
        .filter(|(range, b)| {
            !range.is_empty()
                && b.is_some_and(|b| parquet_prune::bounds_rule_out(field.data_type(), filter, &b))
        })
        .map(|(range, _)| range)
        .collect()
}

/// The row range of each page, from the first row of each: `None` unless
/// they start at row 0, never decrease and stay within the group's `rows`.
fn page_rows(firsts: impl Iterator<Item = i64>, rows: u64) -> Option<Vec<Range<u64>>> {
    let firsts = firsts
        .map(|f| u64::try_from(f).ok())
        .collect::<Option<Vec<u64>>>()?;
    if firsts.first().is_some_and(|f| *f != 0) {
        return None;
    }
    let mut ranges = Vec::with_capacity(firsts.len());
    for (i, start) in firsts.iter().enumerate() {
        let end = firsts.get(i + 1).copied().unwrap_or(rows);
        if end < *start || end > rows {
            return None;
        }
        ranges.push(*start..end);
    }
    Some(ranges)
}

/// The bounds of each page, `None` for a page they do not describe;
/// `None` in all for a column of another type (`unsigned`: strings are in
/// byte-wise order).
fn page_bounds(index: &ColumnIndexMetaData, unsigned: bool) -> Option<Vec<Option<Bounds<'_>>>> {
    if matches!(index, ColumnIndexMetaData::NONE) {
        // No statistics (and `num_pages` would panic).
        return None;
    }
    let pages = usize::try_from(index.num_pages()).ok()?;
    let bounds = match index {
        ColumnIndexMetaData::INT64(i) => i
            .min_values_iter()
            .zip(i.max_values_iter())
            .map(|b| match b {
                (Some(min), Some(max)) => Some(Bounds::Int64 {
                    min: *min,
                    max: *max,
                    exact: true,
                }),
                _ => None,
            })
            .collect(),
        ColumnIndexMetaData::DOUBLE(i) => i
            .min_values_iter()
            .zip(i.max_values_iter())
            .map(|b| match b {
                (Some(min), Some(max)) => Some(Bounds::Double {
                    min: *min,
                    max: *max,
                }),
                _ => None,
            })
            .collect(),
        // Page bounds may be truncated, and say nothing of it.
        ColumnIndexMetaData::BYTE_ARRAY(i) if unsigned => i
            .min_values_iter()
            .zip(i.max_values_iter())
            .map(|b| match b {
                (Some(min), Some(max)) => Some(Bounds::Bytes {
                    min,
                    max,
                    exact: false,
                }),
                _ => None,
            })
            .collect(),
        _ => vec![None; pages],
    };
    // A page whose values are all null fails every comparison.
    let nulls = (0..pages).map(|p| index.is_null_page(p));
    Some(
        bounds
            .into_iter()
            .zip(nulls)
            .map(|(b, null)| if null { Some(Bounds::AllNull) } else { b })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::page_rows;

    #[test]
    fn pages_cover_the_group_from_row_zero() {
        assert_eq!(
            page_rows([0, 10, 25].into_iter(), 30),
            Some(vec![0..10, 10..25, 25..30])
        );
        let empty: Vec<_> = std::iter::once(0..0).collect();
        assert_eq!(page_rows([0].into_iter(), 0), Some(empty));
        assert_eq!(page_rows([5, 10].into_iter(), 30), None);
        assert_eq!(page_rows([0, 20, 10].into_iter(), 30), None);
        assert_eq!(page_rows([0, 40].into_iter(), 30), None);
        assert_eq!(page_rows([0, -1].into_iter(), 30), None);
    }
}
