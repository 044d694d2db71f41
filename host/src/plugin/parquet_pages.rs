//! The page headers of Parquet column chunks a plugin hands the host
//! (Thrift compact protocol), read so that the size each page claims is
//! checked *before* the `parquet` reader allocates it: the reader trusts a
//! header's `uncompressed_page_size` (up to 2 GiB) and reserves that much
//! to decompress the page, so one crafted header in bytes a plugin capped
//! at 64 MiB could make the host hold 2 GiB per page.
//!
//! It reads headers only, bounds every length and nesting depth against
//! the bytes at hand, and never decodes or decompresses page data.

use parquet::file::metadata::RowGroupMetaData;

/// Nesting a page header may have (the format's own needs four).
const MAX_DEPTH: usize = 32;

/// What the host needs of one page header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageSizes {
    /// `uncompressed_page_size`: what decompressing the page allocates.
    pub uncompressed: u64,
    /// `compressed_page_size`: the page's bytes after its header.
    pub compressed: u64,
    /// The header's own length in bytes.
    pub header: u64,
}

/// Read the page header at the start of `bytes`.
pub(crate) fn read_page_header(bytes: &[u8]) -> Result<PageSizes, String> {
    let mut r = Compact { bytes, at: 0 };
    let (mut uncompressed, mut compressed) = (None, None);
    let mut last_id = 0i16;
    while let Some((id, kind)) = r.field_header(&mut last_id)? {
        match (id, kind) {
            (2, I32) => uncompressed = Some(r.i32()?),
            (3, I32) => compressed = Some(r.i32()?),
            _ => r.skip(kind, 0)?,
        }
    }
    let size = |value: Option<i32>, name: &str| {
        let value = value.ok_or_else(|| format!("a page header without `{name}`"))?;
        u64::try_from(value).map_err(|_| format!("a page header whose `{name}` is {value}"))
    };
    Ok(PageSizes {
        uncompressed: size(uncompressed, "uncompressed_page_size")?,
        compressed: size(compressed, "compressed_page_size")?,
        header: r.at as u64,
    })
}

/// Check every page of the column chunks of `group` whose bytes `handed`
/// returns (from a chunk's first byte to the end of its range): none may
/// claim more than `limit` bytes uncompressed, and the pages must tile the
/// chunk. A chunk not handed over is not read here (the reader, if it
/// needs it, fails naming the bytes it lacks).
pub(crate) fn check_row_group(
    group: &RowGroupMetaData,
    handed: impl Fn(u64) -> Option<bytes::Bytes>,
    limit: u64,
) -> Result<(), String> {
    for column in group.columns() {
        let (start, len) = column.byte_range();
        let Some(bytes) = handed(start) else {
            continue;
        };
        let name = column.column_path().string();
        let chunk = &bytes[..usize::try_from(len).unwrap_or(usize::MAX).min(bytes.len())];
        let mut at = 0u64;
        while let Some(page) = usize::try_from(at).ok().and_then(|at| chunk.get(at..))
            && !page.is_empty()
        {
            let sizes = read_page_header(page)
                .map_err(|e| format!("column `{name}`, page at byte {}: {e}", start + at))?;
            if sizes.uncompressed > limit {
                return Err(format!(
                    "column `{name}`, page at byte {}: its header claims {} bytes uncompressed, over the plugin's memory_limit of {} MiB; the page is not read",
                    start + at,
                    sizes.uncompressed,
                    limit >> 20
                ));
            }
            at = at
                .saturating_add(sizes.header)
                .saturating_add(sizes.compressed);
        }
        // A chunk handed over whole whose last page runs past its end.
        if at != len && chunk.len() as u64 == len {
            return Err(format!(
                "column `{name}`: its pages end at byte {}, past the chunk's end at {}",
                start + at,
                start + len
            ));
        }
    }
    Ok(())
}

// Thrift compact protocol types.
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

/// A reader of Thrift compact bytes that never reads past them.
struct Compact<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Compact<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or("a page header cut short (the chunk ends inside it)")?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: u64) -> Result<(), String> {
        let left = (self.bytes.len() - self.at) as u64;
        if n > left {
            return Err(format!(
                "a page header field of {n} bytes, with {left} left in the chunk"
            ));
        }
        self.at += n as usize;
        Ok(())
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a page header varint longer than 10 bytes".into())
    }

    fn zigzag(&mut self) -> Result<i64, String> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn i32(&mut self) -> Result<i32, String> {
        let v = self.zigzag()?;
        i32::try_from(v).map_err(|_| format!("a page header i32 of {v}"))
    }

    /// The next field's id and type, `None` at the struct's end.
    fn field_header(&mut self, last_id: &mut i16) -> Result<Option<(i16, u8)>, String> {
        let b = self.byte()?;
        if b == 0 {
            return Ok(None);
        }
        let delta = i16::from(b >> 4);
        let id = if delta == 0 {
            let id = self.zigzag()?;
            i16::try_from(id).map_err(|_| format!("a page header field id of {id}"))?
        } else {
            last_id.saturating_add(delta)
        };
        *last_id = id;
        Ok(Some((id, b & 0x0f)))
    }

    /// Skip one value of `kind` (in a collection, a bool is one byte).
    fn skip(&mut self, kind: u8, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("a page header nested deeper than {MAX_DEPTH}"));
        }
        match kind {
            BOOL_TRUE | BOOL_FALSE => Ok(()),
            BYTE => self.take(1),
            I16 | I32 | I64 => self.varint().map(|_| ()),
            DOUBLE => self.take(8),
            BINARY => {
                let n = self.varint()?;
                self.take(n)
            }
            LIST | SET => {
                let head = self.byte()?;
                let size = match head >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                self.elements(size, &[head & 0x0f], depth)
            }
            MAP => {
                let size = self.varint()?;
                if size == 0 {
                    return Ok(());
                }
                let kinds = self.byte()?;
                self.elements(size, &[kinds >> 4, kinds & 0x0f], depth)
            }
            STRUCT => {
                let mut last_id = 0;
                while let Some((_, kind)) = self.field_header(&mut last_id)? {
                    self.skip(kind, depth + 1)?;
                }
                Ok(())
            }
            other => Err(format!("a page header field of unknown type {other}")),
        }
    }

    /// Skip `size` elements, each one value of every kind in `kinds`.
    fn elements(&mut self, size: u64, kinds: &[u8], depth: usize) -> Result<(), String> {
        // Every element takes at least one byte: a larger count is a lie,
        // refused before looping over it.
        let left = (self.bytes.len() - self.at) as u64;
        if size > left {
            return Err(format!(
                "a page header collection of {size} elements, with {left} bytes left"
            ));
        }
        for _ in 0..size {
            for &kind in kinds {
                match kind {
                    BOOL_TRUE | BOOL_FALSE => self.take(1)?,
                    kind => self.skip(kind, depth + 1)?,
                }
            }
        }
        Ok(())
    }
}

/// A data page header claiming `uncompressed` and `compressed` bytes,
/// with `extra` fields (encoded, ids after 3) before its end (tests and
/// fuzz seeds).
#[cfg(test)]
pub(crate) fn data_page_header(uncompressed: i64, compressed: i64, extra: &[u8]) -> Vec<u8> {
    let mut h = vec![0x15];
    h.extend(tests::zigzag(0));
    h.push(0x15);
    h.extend(tests::zigzag(uncompressed));
    h.push(0x15);
    h.extend(tests::zigzag(compressed));
    h.extend_from_slice(extra);
    h.push(0);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Zigzag varint of `v`.
    pub(super) fn zigzag(v: i64) -> Vec<u8> {
        let mut u = ((v << 1) ^ (v >> 63)) as u64;
        let mut out = Vec::new();
        loop {
            let b = (u & 0x7f) as u8;
            u >>= 7;
            if u == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn header(uncompressed: i64, compressed: i64, extra: &[u8]) -> Vec<u8> {
        data_page_header(uncompressed, compressed, extra)
    }

    #[test]
    fn reads_the_sizes_and_skips_what_follows_them() {
        // Field 4 (crc, i32), field 5 (a struct holding an i32 and a list
        // of two binaries), then a field by long id (a bool).
        let extra = [
            0x15, 0x04, // crc = 2
            0x1c, // struct, id 5
            0x15, 0x02, // its field 1 = 1
            0x19, 0x28, 0x01, b'a', 0x02, b'b', b'c', // list<binary>: "a", "bc"
            0x00, // end of struct
            0x01, 0x28, // bool true, long id 20
        ];
        let h = header(1000, 400, &extra);
        let sizes = read_page_header(&h).expect("header");
        assert_eq!(
            sizes,
            PageSizes {
                uncompressed: 1000,
                compressed: 400,
                header: h.len() as u64
            }
        );
    }

    #[test]
    fn lies_and_garbage_are_errors_not_allocations() {
        assert!(read_page_header(&header(-5, 10, &[])).is_err_and(|e| e.contains("-5")));
        assert!(read_page_header(&[0x15]).is_err_and(|e| e.contains("cut short")));
        // A list claiming four billion elements in three bytes.
        let list = [0x69, 0xf8, 0xff, 0xff, 0xff, 0x0f];
        assert!(read_page_header(&header(1, 1, &list)).is_err_and(|e| e.contains("elements")));
        // A binary claiming more bytes than there are.
        let binary = [0x68, 0xff, 0x7f];
        assert!(read_page_header(&header(1, 1, &binary)).is_err_and(|e| e.contains("bytes")));
        // Structs nested past any real header's depth.
        let mut deep = vec![0x1c; 64];
        deep.push(0);
        assert!(read_page_header(&header(1, 1, &deep)).is_err_and(|e| e.contains("deeper")));
        assert!(read_page_header(&[0x13]).is_err(), "no sizes at all");
    }
}
