//! Which rows of a Parquet split a cursor reads, in split-row numbers,
//! and how that maps to the reader's `RowSelection` and back to positions.
//!
//! The rows read are runs ([`Segment`]s): rows of the row groups read,
//! from the restored position on, less those whose pages the filters rule
//! out (`parquet_pages.rs`). The reader yields exactly those rows, in
//! order, so the number of rows it yielded says where the split stands.

use std::ops::Range;

use parquet::arrow::arrow_reader::RowSelector;

/// A run of rows the reader yields consecutively: `rows` rows of the
/// split from row `first` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub first: u64,
    pub rows: u64,
}

/// `ranges` sorted, overlapping and adjacent ones merged.
pub fn merged(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// The runs of `group` (split rows) at or after row `from` that are not in
/// `ruled_out` (sorted, disjoint ranges of split rows).
pub fn runs(group: Range<u64>, from: u64, ruled_out: &[Range<u64>]) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut at = group.start.max(from);
    for r in ruled_out {
        if at >= group.end {
            break;
        }
        if r.end <= at {
            continue;
        }
        let stop = r.start.min(group.end);
        if stop > at {
            out.push(Segment {
                first: at,
                rows: stop - at,
            });
        }
        at = at.max(r.end);
    }
    if group.end > at {
        out.push(Segment {
            first: at,
            rows: group.end - at,
        });
    }
    out
}

/// The reader's selection over the row groups it reads (`groups`, in
/// split rows, in order) that yields exactly `segments` (each inside one
/// of them); `None` when that is every row of them.
pub fn selectors(groups: &[Range<u64>], segments: &[Segment]) -> Option<Vec<RowSelector>> {
    let mut out: Vec<RowSelector> = Vec::new();
    let mut push = |skip: bool, rows: u64| {
        let rows = usize::try_from(rows).unwrap_or(usize::MAX);
        if rows == 0 {
            return;
        }
        match out.last_mut() {
            Some(last) if last.skip == skip => last.row_count += rows,
            _ => out.push(if skip {
                RowSelector::skip(rows)
            } else {
                RowSelector::select(rows)
            }),
        }
    };
    let mut next = segments.iter().peekable();
    for g in groups {
        let mut at = g.start;
        while let Some(s) = next.next_if(|s| s.first < g.end) {
            push(true, s.first.saturating_sub(at));
            push(false, s.rows);
            at = s.first + s.rows;
        }
        push(true, g.end.saturating_sub(at));
    }
    (out.iter().any(|s| s.skip)).then_some(out)
}

/// The split position after the first `yielded` rows of `segments`: just
/// past the last of them (never past a row that was not yielded yet).
pub fn position_after(segments: &[Segment], mut yielded: u64) -> Option<u64> {
    for s in segments {
        if yielded <= s.rows {
            return Some(s.first + yielded);
        }
        yielded -= s.rows;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{Segment, position_after, runs, selectors};
    use parquet::arrow::arrow_reader::RowSelector;

    fn seg(first: u64, rows: u64) -> Segment {
        Segment { first, rows }
    }

    #[test]
    fn positions_count_the_rows_that_were_not_read() {
        // Groups of 100 rows; the second was ruled out, and reading
        // resumed at row 50 of the first.
        let segments = [seg(50, 50), seg(200, 100)];
        assert_eq!(position_after(&segments, 0), Some(50));
        assert_eq!(position_after(&segments, 30), Some(80));
        // The end of a run: not past the next one (not read yet).
        assert_eq!(position_after(&segments, 50), Some(100));
        assert_eq!(position_after(&segments, 51), Some(201));
        assert_eq!(position_after(&segments, 150), Some(300));
        assert_eq!(position_after(&segments, 151), None);
    }

    #[test]
    fn runs_leave_out_rows_before_the_position_and_ruled_out_pages() {
        let out = [110..120, 150..160, 190..250];
        assert_eq!(
            runs(100..200, 0, &out),
            vec![seg(100, 10), seg(120, 30), seg(160, 30)]
        );
        assert_eq!(runs(100..200, 115, &out), vec![seg(120, 30), seg(160, 30)]);
        assert_eq!(runs(100..200, 155, &out), vec![seg(160, 30)]);
        assert_eq!(runs(100..200, 195, &out), vec![]);
        assert_eq!(runs(100..200, 0, &[]), vec![seg(100, 100)]);
        assert_eq!(runs(100..200, 300, &[]), vec![]);
        assert_eq!(runs(100..200, 0, &[0..100, 200..300]), vec![seg(100, 100)]);
        let all = 0..300;
        assert_eq!(runs(100..200, 0, std::slice::from_ref(&all)), vec![]);
    }

    #[test]
    fn selectors_skip_what_is_not_in_a_segment() {
        let groups = [0..100, 200..300];
        // Every row of the groups read: no selection.
        assert_eq!(selectors(&groups, &[seg(0, 100), seg(200, 100)]), None);
        assert_eq!(
            selectors(&groups, &[seg(50, 20), seg(200, 10), seg(290, 10)]),
            Some(vec![
                RowSelector::skip(50),
                RowSelector::select(20),
                RowSelector::skip(30),
                RowSelector::select(10),
                RowSelector::skip(80),
                RowSelector::select(10),
            ])
        );
        assert_eq!(
            selectors(&groups, &[seg(0, 100), seg(250, 10)]),
            Some(vec![
                RowSelector::select(100),
                RowSelector::skip(50),
                RowSelector::select(10),
                RowSelector::skip(40),
            ])
        );
    }
}
