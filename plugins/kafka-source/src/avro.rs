//! Avro binary datums (one per message, optionally behind the Confluent
//! 5-byte prefix) decoded into Arrow columns. A datum that does not match
//! the writer schema is reported with its reason and adds no row.

use std::sync::Arc;

use fv_plugin_sdk::arrow_array::ArrayRef;
use fv_plugin_sdk::arrow_array::NullArray;
use fv_plugin_sdk::arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Date32Builder, Float32Builder, Float64Builder, Int32Builder,
    Int64Builder, StringBuilder, TimestampMicrosecondBuilder, TimestampMillisecondBuilder,
};

use crate::avro_schema::{AvroField, AvroRecord, AvroType};

/// Decodes datums of one writer schema.
pub struct AvroDecoder {
    record: AvroRecord,
    confluent_framing: bool,
    /// Per record field: whether it becomes a column (all, until a
    /// projection). Every field is still read: a datum has no index, so
    /// reaching a field means reading the ones before it, and a datum is
    /// checked whole whatever is projected, so the same datums are
    /// rejected under every projection.
    keep: Vec<bool>,
}

/// The columns of the good datums, and the index and reason of each bad one.
pub struct AvroColumns {
    /// One array per record field, one row per good datum.
    pub columns: Vec<ArrayRef>,
    /// Indices (into the input) of the datums that became rows.
    pub good: Vec<usize>,
    /// Indices and reasons of the datums that did not.
    pub bad: Vec<(usize, String)>,
}

/// One decoded value, borrowing from the payload or the schema.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Val<'a> {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Bytes(&'a [u8]),
    Str(&'a str),
}

impl AvroDecoder {
    /// A decoder for this writer schema.
    pub fn new(record: AvroRecord, confluent_framing: bool) -> Self {
        AvroDecoder {
            keep: vec![true; record.fields.len()],
            record,
            confluent_framing,
        }
    }

    /// Keep only some of the columns: `keep` has one flag per column kept
    /// so far (per record field, the first time).
    pub fn narrow(&mut self, keep: &[bool]) {
        let mut flags = keep.iter();
        for kept in self.keep.iter_mut().filter(|k| **k) {
            *kept = flags.next().copied().unwrap_or(false);
        }
    }

    /// Decode every payload (`None`: a message without payload) into the
    /// kept columns.
    pub fn decode(&self, payloads: &[Option<&[u8]>]) -> AvroColumns {
        let mut builders: Vec<Option<Builder>> = self
            .record
            .fields
            .iter()
            .zip(&self.keep)
            .map(|(f, keep)| keep.then(|| Builder::new(&f.ty, payloads.len())))
            .collect();
        let mut good = Vec::with_capacity(payloads.len());
        let mut bad = Vec::new();
        let mut row: Vec<Val> = Vec::with_capacity(self.record.fields.len());
        for (i, payload) in payloads.iter().enumerate() {
            row.clear();
            match self.datum(*payload, &mut row) {
                Ok(()) => {
                    for (b, v) in builders.iter_mut().zip(row.iter()) {
                        if let Some(b) = b {
                            b.append(*v);
                        }
                    }
                    good.push(i);
                }
                Err(reason) => bad.push((i, reason)),
            }
        }
        AvroColumns {
            columns: builders
                .into_iter()
                .flatten()
                .map(Builder::finish)
                .collect(),
            good,
            bad,
        }
    }

    /// Decode one datum into `row`, checking that it is consumed exactly.
    fn datum<'a>(
        &'a self,
        payload: Option<&'a [u8]>,
        row: &mut Vec<Val<'a>>,
    ) -> Result<(), String> {
        let Some(payload) = payload else {
            // A tombstone: a row of nulls, if every field may be null.
            if let Some(f) = self
                .record
                .fields
                .iter()
                .find(|f| f.null_branch.is_none() && f.ty != AvroType::Null)
            {
                return Err(format!(
                    "the message has no payload (a tombstone) and field `{}` is not nullable",
                    f.name
                ));
            }
            row.extend(self.record.fields.iter().map(|_| Val::Null));
            return Ok(());
        };
        let bytes = if self.confluent_framing {
            match payload {
                [0, _, _, _, _, rest @ ..] => rest,
                _ => {
                    return Err(
                        "no Confluent framing (magic byte 0 and a 4-byte schema id); set confluent_framing = false?"
                            .into(),
                    );
                }
            }
        } else {
            payload
        };
        let mut pos = 0;
        for field in &self.record.fields {
            let v = read_field(field, bytes, &mut pos)
                .map_err(|e| format!("field `{}`: {e}", field.name))?;
            row.push(v);
        }
        if pos != bytes.len() {
            return Err(format!(
                "{} bytes left after the datum: it was not written with `avro_schema`",
                bytes.len() - pos
            ));
        }
        Ok(())
    }
}

/// One field, with its union branch when nullable.
fn read_field<'a>(
    field: &'a AvroField,
    bytes: &'a [u8],
    pos: &mut usize,
) -> Result<Val<'a>, String> {
    if let Some(null_branch) = field.null_branch {
        let branch = get_long(bytes, pos)?;
        if branch == i64::from(null_branch) {
            return Ok(Val::Null);
        }
        if branch != i64::from(1 - null_branch.min(1)) {
            return Err(format!("union branch {branch} does not exist"));
        }
    }
    read_value(&field.ty, bytes, pos)
}

fn read_value<'a>(ty: &'a AvroType, bytes: &'a [u8], pos: &mut usize) -> Result<Val<'a>, String> {
    Ok(match ty {
        AvroType::Null => Val::Null,
        AvroType::Boolean => match take(bytes, pos, 1)? {
            [0] => Val::Bool(false),
            [1] => Val::Bool(true),
            other => return Err(format!("{other:?} is not a boolean")),
        },
        AvroType::Int | AvroType::Date => {
            let v = get_long(bytes, pos)?;
            Val::Int(i32::try_from(v).map_err(|_| format!("{v} does not fit an int"))?)
        }
        AvroType::Long | AvroType::TimestampMillis | AvroType::TimestampMicros => {
            Val::Long(get_long(bytes, pos)?)
        }
        AvroType::Float => {
            let b = take(bytes, pos, 4)?;
            Val::Float(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        AvroType::Double => {
            let b = take(bytes, pos, 8)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            Val::Double(f64::from_le_bytes(a))
        }
        AvroType::Bytes => {
            let len = length(bytes, pos)?;
            Val::Bytes(take(bytes, pos, len)?)
        }
        AvroType::String => {
            let len = length(bytes, pos)?;
            let b = take(bytes, pos, len)?;
            Val::Str(
                std::str::from_utf8(b).map_err(|e| format!("a string that is not UTF-8: {e}"))?,
            )
        }
        AvroType::Enum(symbols) => {
            let i = get_long(bytes, pos)?;
            let symbol = usize::try_from(i)
                .ok()
                .and_then(|i| symbols.get(i))
                .ok_or_else(|| {
                    format!("enum index {i} is not one of the {} symbols", symbols.len())
                })?;
            Val::Str(symbol)
        }
        AvroType::Fixed(size) => Val::Bytes(take(bytes, pos, *size)?),
    })
}

/// A length prefix.
fn length(bytes: &[u8], pos: &mut usize) -> Result<usize, String> {
    let len = get_long(bytes, pos)?;
    usize::try_from(len).map_err(|_| format!("negative length {len}"))
}

/// The next `n` bytes.
fn take<'a>(bytes: &'a [u8], pos: &mut usize, n: usize) -> Result<&'a [u8], String> {
    let end = pos
        .checked_add(n)
        .filter(|end| *end <= bytes.len())
        .ok_or_else(|| format!("the datum ends early (needs {n} more bytes at byte {pos})"))?;
    let out = &bytes[*pos..end];
    *pos = end;
    Ok(out)
}

/// Read a zig-zag varint (Avro's `int` and `long`) at `*pos`, advancing it.
pub fn get_long(bytes: &[u8], pos: &mut usize) -> Result<i64, String> {
    let mut z: u64 = 0;
    let mut shift = 0u32;
    loop {
        let b = *bytes.get(*pos).ok_or("the datum ends inside a number")?;
        *pos += 1;
        if shift == 63 && b > 1 {
            return Err("a number longer than 64 bits".into());
        }
        z |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return Err("a number longer than 64 bits".into());
        }
    }
    Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
}

/// A column under construction.
enum Builder {
    Null(usize),
    Bool(BooleanBuilder),
    Int(Int32Builder),
    Long(Int64Builder),
    Float(Float32Builder),
    Double(Float64Builder),
    Bytes(BinaryBuilder),
    Str(StringBuilder),
    Date(Date32Builder),
    TsMillis(TimestampMillisecondBuilder),
    TsMicros(TimestampMicrosecondBuilder),
}

impl Builder {
    fn new(ty: &AvroType, capacity: usize) -> Self {
        match ty {
            AvroType::Null => Builder::Null(0),
            AvroType::Boolean => Builder::Bool(BooleanBuilder::with_capacity(capacity)),
            AvroType::Int => Builder::Int(Int32Builder::with_capacity(capacity)),
            AvroType::Long => Builder::Long(Int64Builder::with_capacity(capacity)),
            AvroType::Float => Builder::Float(Float32Builder::with_capacity(capacity)),
            AvroType::Double => Builder::Double(Float64Builder::with_capacity(capacity)),
            AvroType::Bytes | AvroType::Fixed(_) => Builder::Bytes(BinaryBuilder::new()),
            AvroType::String | AvroType::Enum(_) => Builder::Str(StringBuilder::new()),
            AvroType::Date => Builder::Date(Date32Builder::with_capacity(capacity)),
            AvroType::TimestampMillis => {
                Builder::TsMillis(TimestampMillisecondBuilder::with_capacity(capacity))
            }
            AvroType::TimestampMicros => {
                Builder::TsMicros(TimestampMicrosecondBuilder::with_capacity(capacity))
            }
        }
    }

    /// Append a value of this column's type (anything else appends null,
    /// which decoding by the same schema never produces).
    fn append(&mut self, v: Val) {
        match (self, v) {
            (Builder::Null(n), _) => *n += 1,
            (Builder::Bool(b), Val::Bool(x)) => b.append_value(x),
            (Builder::Int(b), Val::Int(x)) => b.append_value(x),
            (Builder::Date(b), Val::Int(x)) => b.append_value(x),
            (Builder::Long(b), Val::Long(x)) => b.append_value(x),
            (Builder::TsMillis(b), Val::Long(x)) => b.append_value(x),
            (Builder::TsMicros(b), Val::Long(x)) => b.append_value(x),
            (Builder::Float(b), Val::Float(x)) => b.append_value(x),
            (Builder::Double(b), Val::Double(x)) => b.append_value(x),
            (Builder::Bytes(b), Val::Bytes(x)) => b.append_value(x),
            (Builder::Str(b), Val::Str(x)) => b.append_value(x),
            (Builder::Bool(b), _) => b.append_null(),
            (Builder::Int(b), _) => b.append_null(),
            (Builder::Date(b), _) => b.append_null(),
            (Builder::Long(b), _) => b.append_null(),
            (Builder::TsMillis(b), _) => b.append_null(),
            (Builder::TsMicros(b), _) => b.append_null(),
            (Builder::Float(b), _) => b.append_null(),
            (Builder::Double(b), _) => b.append_null(),
            (Builder::Bytes(b), _) => b.append_null(),
            (Builder::Str(b), _) => b.append_null(),
        }
    }

    fn finish(self) -> ArrayRef {
        match self {
            Builder::Null(n) => Arc::new(NullArray::new(n)),
            Builder::Bool(mut b) => Arc::new(b.finish()),
            Builder::Int(mut b) => Arc::new(b.finish()),
            Builder::Long(mut b) => Arc::new(b.finish()),
            Builder::Float(mut b) => Arc::new(b.finish()),
            Builder::Double(mut b) => Arc::new(b.finish()),
            Builder::Bytes(mut b) => Arc::new(b.finish()),
            Builder::Str(mut b) => Arc::new(b.finish()),
            Builder::Date(mut b) => Arc::new(b.finish()),
            Builder::TsMillis(mut b) => Arc::new(b.finish()),
            Builder::TsMicros(mut b) => Arc::new(b.finish()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::avro_schema;
    use fv_plugin_sdk::arrow_array::{Array, Int64Array, StringArray, TimestampMillisecondArray};

    fn record() -> Result<AvroRecord, String> {
        avro_schema::parse(
            r#"{"type":"record","name":"Bid","fields":[
                {"name":"id","type":"long"},
                {"name":"who","type":["null","string"]},
                {"name":"side","type":{"type":"enum","name":"Side","symbols":["BUY","SELL"]}},
                {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
                {"name":"price","type":"double"}
            ]}"#,
        )
    }

    /// id=-1 (01), who=branch 1 (02) "ab" (04 61 62), side=SELL (02),
    /// at=1000 (d0 0f), price=1.5.
    fn datum() -> Vec<u8> {
        let mut d = vec![0x01, 0x02, 0x04, b'a', b'b', 0x02, 0xd0, 0x0f];
        d.extend_from_slice(&1.5f64.to_le_bytes());
        d
    }

    #[test]
    fn varints() -> Result<(), String> {
        for (bytes, want) in [
            (&[0x00][..], 0i64),
            (&[0x01], -1),
            (&[0x02], 1),
            (&[0x7f], -64),
            (&[0x80, 0x01], 64),
            (
                &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                i64::MAX,
            ),
            (
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                i64::MIN,
            ),
        ] {
            let mut pos = 0;
            assert_eq!(get_long(bytes, &mut pos)?, want);
            assert_eq!(pos, bytes.len());
        }
        let mut pos = 0;
        assert!(get_long(&[0x80], &mut pos).is_err());
        let mut pos = 0;
        assert!(get_long(&[0xff; 11], &mut pos).is_err());
        Ok(())
    }

    #[test]
    fn decodes_good_datums_and_names_bad_ones() -> Result<(), String> {
        let good = datum();
        let mut framed = vec![0, 0, 0, 0, 7];
        framed.extend_from_slice(&good);
        let truncated = good[..4].to_vec();
        let mut trailing = good.clone();
        trailing.push(0);
        let plain = AvroDecoder::new(record()?, false);
        let out = plain.decode(&[Some(&good), Some(&truncated), Some(&trailing), None]);
        assert_eq!(out.good, vec![0]);
        assert_eq!(out.bad.len(), 3);
        assert!(out.bad[0].1.contains("field `who`"), "{}", out.bad[0].1);
        assert!(out.bad[1].1.contains("bytes left"), "{}", out.bad[1].1);
        assert!(out.bad[2].1.contains("tombstone"), "{}", out.bad[2].1);
        let ids = out.columns[0].as_any().downcast_ref::<Int64Array>();
        assert_eq!(ids.map(|a| a.value(0)), Some(-1));
        let who = out.columns[1].as_any().downcast_ref::<StringArray>();
        assert_eq!(who.map(|a| a.value(0)), Some("ab"));
        let side = out.columns[2].as_any().downcast_ref::<StringArray>();
        assert_eq!(side.map(|a| a.value(0)), Some("SELL"));
        let at = out.columns[3]
            .as_any()
            .downcast_ref::<TimestampMillisecondArray>();
        assert_eq!(at.map(|a| a.value(0)), Some(1000));

        let confluent = AvroDecoder::new(record()?, true);
        let out = confluent.decode(&[Some(&framed), Some(&good)]);
        assert_eq!(out.good, vec![0]);
        assert_eq!(out.columns[0].len(), 1);
        Ok(())
    }

    #[test]
    fn narrowed_decoders_build_only_the_kept_columns() -> Result<(), String> {
        let good = datum();
        let truncated = good[..4].to_vec();
        let mut decoder = AvroDecoder::new(record()?, false);
        // id, who, side, at, price → side, price.
        decoder.narrow(&[false, false, true, false, true]);
        let out = decoder.decode(&[Some(&good), Some(&truncated)]);
        // The same datums are rejected as when every field is kept.
        assert_eq!(out.good, vec![0]);
        assert_eq!(out.bad.len(), 1);
        assert_eq!(out.columns.len(), 2);
        let side = out.columns[0].as_any().downcast_ref::<StringArray>();
        assert_eq!(side.map(|a| a.value(0)), Some("SELL"));
        // Narrowed again, relative to what is kept: price only; then nothing.
        decoder.narrow(&[false, true]);
        let out = decoder.decode(&[Some(&good)]);
        assert_eq!(out.columns.len(), 1);
        assert_eq!(
            out.columns[0].data_type(),
            &fv_plugin_sdk::arrow_schema::DataType::Float64
        );
        decoder.narrow(&[false]);
        let out = decoder.decode(&[Some(&good), Some(&good)]);
        assert_eq!((out.columns.len(), out.good.len()), (0, 2));
        Ok(())
    }
}
