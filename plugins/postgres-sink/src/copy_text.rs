//! Arrow rows as PostgreSQL `COPY … FROM STDIN` text format (tab between
//! values, `\N` for NULL, backslash escapes), and Arrow types as the
//! column types of a table the sink creates.
//!
//! Every value passes through one escaper, so no value can end a row or
//! a field early whatever its type's text form holds.

use fv_plugin_sdk::arrow_array::cast::AsArray;
use fv_plugin_sdk::arrow_array::{Array, RecordBatch};
use fv_plugin_sdk::arrow_schema::{DataType, TimeUnit};

use arrow_cast::display::{ArrayFormatter, FormatOptions};

/// How a row's op column is read: changelog rows that delete their key,
/// and update-before images an upsert must skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOp {
    /// Insert or update (the row's values are the key's new state).
    Upsert,
    /// Remove the key.
    Delete,
    /// The old image of an update (Flink's `-U`): not applied.
    Skip,
}

/// The op a changelog value names: `delete`, `d` or `-D` delete;
/// `update_before` or `-U` is skipped; anything else (insert, update,
/// `+I`, `+U`, …) upserts.
pub fn row_op(value: &str) -> RowOp {
    let v = value.trim();
    if ["delete", "d", "-d"]
        .iter()
        .any(|d| v.eq_ignore_ascii_case(d))
    {
        RowOp::Delete
    } else if ["update_before", "-u"]
        .iter()
        .any(|d| v.eq_ignore_ascii_case(d))
    {
        RowOp::Skip
    } else {
        RowOp::Upsert
    }
}

/// The last field of each row an upsert stages: none (insert mode), `u`
/// for every row, or `d`/`u` read from the op column at an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpField {
    /// Rows are inserted: no op field.
    Absent,
    /// Every row upserts.
    Upsert,
    /// The op column at this index says.
    Column(usize),
}

/// Append `batch`'s rows to `out`: the columns at `columns`, in that
/// order, then the op field `op` asks for. Rows whose op says skip are
/// left out. The number of rows appended.
pub fn append_rows(
    batch: &RecordBatch,
    columns: &[usize],
    op: OpField,
    out: &mut Vec<u8>,
) -> Result<u64, String> {
    let options = FormatOptions::default();
    let mut formatters = Vec::with_capacity(columns.len());
    for &c in columns {
        let array = batch.column(c);
        let formatter = match array.data_type() {
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => None,
            _ => Some(
                ArrayFormatter::try_new(array.as_ref(), &options)
                    .map_err(|e| format!("column `{}`: {e}", batch.schema().field(c).name()))?,
            ),
        };
        formatters.push(formatter);
    }
    let ops = match op {
        OpField::Column(i) => Some(
            arrow_cast::cast(batch.column(i).as_ref(), &DataType::Utf8)
                .map_err(|e| format!("the op column: {e}"))?,
        ),
        _ => None,
    };
    let ops = ops.as_ref().map(|a| a.as_string::<i32>());
    let mut text = String::new();
    let mut written = 0;
    for row in 0..batch.num_rows() {
        let row_op = match ops {
            Some(ops) if ops.is_valid(row) => row_op(ops.value(row)),
            _ => RowOp::Upsert,
        };
        if row_op == RowOp::Skip {
            continue;
        }
        for (n, (&c, formatter)) in columns.iter().zip(&formatters).enumerate() {
            if n > 0 {
                out.push(b'\t');
            }
            let array = batch.column(c);
            if array.is_null(row) {
                out.extend_from_slice(b"\\N");
                continue;
            }
            match formatter {
                Some(f) => {
                    text.clear();
                    use std::fmt::Write;
                    write!(text, "{}", f.value(row)).map_err(|e| e.to_string())?;
                    escape_into(text.as_bytes(), out);
                }
                None => bytea_into(binary_value(array.as_ref(), row), out),
            }
        }
        if op != OpField::Absent {
            out.extend_from_slice(match row_op {
                RowOp::Delete => b"\td",
                _ => b"\tu",
            });
        }
        out.push(b'\n');
        written += 1;
    }
    Ok(written)
}

fn binary_value(array: &dyn Array, row: usize) -> &[u8] {
    match array.data_type() {
        DataType::Binary => array.as_binary::<i32>().value(row),
        DataType::LargeBinary => array.as_binary::<i64>().value(row),
        _ => array.as_binary_view().value(row),
    }
}

/// COPY text escapes: backslash, and the bytes that end a field or row.
fn escape_into(value: &[u8], out: &mut Vec<u8>) {
    for &b in value {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
}

/// A `bytea` value in hex form (`\x…`), its backslash escaped for COPY.
fn bytea_into(value: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(b"\\\\x");
    for &b in value {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 15)]);
    }
}

/// The column type a created table gives an Arrow field.
pub fn pg_type(data_type: &DataType) -> String {
    match data_type {
        DataType::Boolean => "boolean".into(),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "smallint".into(),
        DataType::Int32 | DataType::UInt16 => "integer".into(),
        DataType::Int64 | DataType::UInt32 => "bigint".into(),
        DataType::UInt64 => "numeric(20)".into(),
        DataType::Float16 | DataType::Float32 => "real".into(),
        DataType::Float64 => "double precision".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("numeric({p},{s})"),
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Time32(_) | DataType::Time64(_) => "time".into(),
        DataType::Timestamp(
            TimeUnit::Second | TimeUnit::Millisecond | TimeUnit::Microsecond | TimeUnit::Nanosecond,
            None,
        ) => "timestamp".into(),
        DataType::Timestamp(_, Some(_)) => "timestamptz".into(),
        DataType::Duration(_) | DataType::Interval(_) => "interval".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "bytea".into(),
        _ => "text".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fv_plugin_sdk::arrow_array::{BinaryArray, BooleanArray, Int64Array, StringArray};
    use fv_plugin_sdk::arrow_schema::{Field, Schema};
    use std::sync::Arc;

    fn batch() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("ok", DataType::Boolean, true),
            Field::new("raw", DataType::Binary, true),
            Field::new("op", DataType::Utf8, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])),
                Arc::new(StringArray::from(vec![
                    Some("a\tb\\c\nd"),
                    Some("\\N"),
                    None,
                ])),
                Arc::new(BooleanArray::from(vec![Some(true), Some(false), None])),
                Arc::new(BinaryArray::from(vec![
                    Some(&[0u8, 255][..]),
                    None,
                    Some(&b""[..]),
                ])),
                Arc::new(StringArray::from(vec![
                    Some("insert"),
                    Some("-U"),
                    Some("D"),
                ])),
            ],
        )
        .expect("batch")
    }

    #[test]
    fn values_are_escaped_and_nulls_are_marked() {
        let mut out = Vec::new();
        let n = append_rows(&batch(), &[0, 1, 2, 3], OpField::Absent, &mut out).expect("rows");
        assert_eq!(n, 3);
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            "1\ta\\tb\\\\c\\nd\ttrue\t\\\\x00ff\n\\N\t\\\\N\tfalse\t\\N\n3\t\\N\t\\N\t\\\\x\n"
        );
    }

    #[test]
    fn the_op_column_marks_deletes_and_drops_update_befores() {
        let mut out = Vec::new();
        let n = append_rows(&batch(), &[0], OpField::Column(4), &mut out).expect("rows");
        assert_eq!(n, 2);
        assert_eq!(String::from_utf8(out).expect("utf8"), "1\tu\n3\td\n");
        let mut out = Vec::new();
        append_rows(&batch(), &[0], OpField::Upsert, &mut out).expect("rows");
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            "1\tu\n\\N\tu\n3\tu\n"
        );
    }

    #[test]
    fn arrow_types_map_to_column_types() {
        assert_eq!(pg_type(&DataType::Int64), "bigint");
        assert_eq!(pg_type(&DataType::Utf8), "text");
        assert_eq!(
            pg_type(&DataType::Timestamp(
                TimeUnit::Millisecond,
                Some("UTC".into())
            )),
            "timestamptz"
        );
        assert_eq!(pg_type(&DataType::Decimal128(10, 2)), "numeric(10,2)");
    }
}
