//! Where a path's bytes come from: a granted directory (WASI files) or
//! an object store (`s3://`, `gs://`, `az://` through `fv:host/objects`).
//!
//! Everything above this module sees the same three things for either:
//! a file's length, a [`Reader`] from an offset on, and a listing for a
//! glob. An object is read sequentially in ranged reads of
//! [`OBJECT_BLOCK`] (one request each, never past its end), and Parquet
//! column chunks as exact ranges, so a split reads only its own bytes.
//! This module never decodes and never decides what to read.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// Bytes asked of an object per ranged read while streaming it.
pub const OBJECT_BLOCK: u64 = 8 << 20;

/// Whether `path` names an object rather than a file.
pub fn is_object(path: &str) -> bool {
    ["s3://", "gs://", "az://"]
        .iter()
        .any(|scheme| path.starts_with(scheme))
}

/// The length of the file or object at `path`.
pub fn len(path: &str) -> Result<u64, String> {
    if is_object(path) {
        return objects::size(path);
    }
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| format!("cannot read `{path}`: {e}"))
}

/// Exactly `len` bytes of `path` from `start` (an error if it ends
/// before).
pub fn read_at(path: &str, start: u64, len: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    if is_object(path) {
        while (out.len() as u64) < len {
            let want = (len - out.len() as u64).min(objects::MAX_TRANSFER);
            let part = objects::read(path, start + out.len() as u64, want)?;
            if part.is_empty() {
                break;
            }
            out.extend_from_slice(&part);
        }
    } else {
        let mut file = File::open(path).map_err(|e| format!("cannot open `{path}`: {e}"))?;
        file.seek(SeekFrom::Start(start))
            .map_err(|e| format!("cannot seek in `{path}`: {e}"))?;
        file.take(len)
            .read_to_end(&mut out)
            .map_err(|e| format!("cannot read `{path}`: {e}"))?;
    }
    if (out.len() as u64) < len {
        return Err(format!(
            "`{path}` ends before byte {} (it holds {} bytes from {start})",
            start + len,
            out.len()
        ));
    }
    Ok(out)
}

/// `path` read from `offset` on.
pub fn open(path: &str, offset: u64) -> Result<Reader, String> {
    if is_object(path) {
        return Ok(Reader::Object {
            size: objects::size(path)?,
            url: path.to_string(),
            offset,
        });
    }
    let mut file = File::open(path).map_err(|e| format!("cannot open `{path}`: {e}"))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| format!("cannot seek in `{path}`: {e}"))?;
    Ok(Reader::File(file))
}

/// `path`, of `size` bytes (known already), read from `offset` on.
pub fn open_sized(path: &str, offset: u64, size: u64) -> Result<Reader, String> {
    match is_object(path) {
        true => Ok(Reader::Object {
            url: path.to_string(),
            offset,
            size,
        }),
        false => open(path, offset),
    }
}

/// A file or an object read sequentially.
pub enum Reader {
    /// A granted file, positioned where reading goes on.
    File(File),
    /// An object: the next byte to read, and where it ends.
    Object {
        /// The object's URL.
        url: String,
        /// The next byte.
        offset: u64,
        /// Its size when opened.
        size: u64,
    },
}

impl Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Reader::File(f) => f.read(buf),
            Reader::Object { url, offset, size } => {
                let want = (buf.len() as u64)
                    .min(size.saturating_sub(*offset))
                    .min(OBJECT_BLOCK);
                if want == 0 {
                    return Ok(0);
                }
                let bytes = objects::read(url, *offset, want).map_err(std::io::Error::other)?;
                let n = bytes.len().min(buf.len());
                buf[..n].copy_from_slice(&bytes[..n]);
                *offset += n as u64;
                Ok(n)
            }
        }
    }
}

/// Objects whose URL matches `pattern` (`s3://bucket/dir/*.csv`; `**`
/// crosses directories), sorted: the prefix before the first wildcard
/// is listed, each key below it matched component by component.
pub fn list_objects(pattern: &str) -> Result<Vec<String>, String> {
    let wild = |c: &str| c.contains(['*', '?', '[']);
    let Some(first_wild) = pattern.find(['*', '?', '[']) else {
        // A single object: it must exist.
        objects::size(pattern)?;
        return Ok(vec![pattern.to_string()]);
    };
    // List from the last `/` before the first wildcard.
    let prefix = match pattern[..first_wild].rfind('/') {
        Some(i) => &pattern[..=i],
        None => return Err(format!("`{pattern}` has no bucket before its wildcard")),
    };
    let rest: Vec<glob::Pattern> = pattern[prefix.len()..]
        .split('/')
        .map(glob::Pattern::new)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("bad glob `{pattern}`: {e}"))?;
    debug_assert!(rest.iter().any(|p| wild(p.as_str())));
    let mut out = Vec::new();
    for object in objects::list(prefix)? {
        let below = &object.url[prefix.len()..];
        let parts: Vec<&str> = below.split('/').collect();
        if matches_components(&rest, &parts) {
            out.push(object.url);
        }
    }
    Ok(out)
}

/// Whether path components `parts` match `patterns` one for one (`**`:
/// any number of components, none included).
fn matches_components(patterns: &[glob::Pattern], parts: &[&str]) -> bool {
    match patterns.split_first() {
        None => parts.is_empty(),
        Some((p, rest)) if p.as_str() == "**" => {
            (0..=parts.len()).any(|skip| matches_components(rest, &parts[skip..]))
        }
        Some((p, rest)) => parts
            .split_first()
            .is_some_and(|(part, tail)| p.matches(part) && matches_components(rest, tail)),
    }
}

/// The host's object storage in a Wasm build; a native build (unit
/// tests) has no host to ask.
#[cfg(target_arch = "wasm32")]
mod objects {
    pub use fv_plugin_sdk::objects::MAX_TRANSFER;

    pub fn size(url: &str) -> Result<u64, String> {
        fv_plugin_sdk::objects::size(url)
    }

    pub fn read(url: &str, offset: u64, len: u64) -> Result<Vec<u8>, String> {
        fv_plugin_sdk::objects::read(url, offset, len)
    }

    pub fn list(prefix: &str) -> Result<Vec<fv_plugin_sdk::objects::ObjectMeta>, String> {
        fv_plugin_sdk::objects::list_objects(prefix)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod objects {
    pub const MAX_TRANSFER: u64 = 64 << 20;

    /// What `list` returns.
    pub struct ObjectMeta {
        pub url: String,
    }

    fn unavailable(url: &str) -> String {
        format!("`{url}`: object storage is lent by the host; a native build has none")
    }

    pub fn size(url: &str) -> Result<u64, String> {
        Err(unavailable(url))
    }

    pub fn read(url: &str, _offset: u64, _len: u64) -> Result<Vec<u8>, String> {
        Err(unavailable(url))
    }

    pub fn list(prefix: &str) -> Result<Vec<ObjectMeta>, String> {
        Err(unavailable(prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, key: &str) -> bool {
        let patterns: Vec<glob::Pattern> = pattern
            .split('/')
            .map(|p| glob::Pattern::new(p).expect("pattern"))
            .collect();
        matches_components(&patterns, &key.split('/').collect::<Vec<_>>())
    }

    #[test]
    fn object_globs_match_component_by_component() {
        assert!(matches("*.csv", "a.csv"));
        assert!(!matches("*.csv", "dir/a.csv"), "`*` stays in its component");
        assert!(matches("**/*.csv", "a.csv"));
        assert!(matches("**/*.csv", "x/y/a.csv"));
        assert!(matches("2024-*/part-?.parquet", "2024-01/part-1.parquet"));
        assert!(!matches("2024-*/part-?.parquet", "2023-01/part-1.parquet"));
    }

    #[test]
    fn local_files_read_exact_ranges_and_say_where_they_end() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").expect("write");
        let path = path.to_str().expect("utf-8");
        assert_eq!(len(path), Ok(10));
        assert_eq!(read_at(path, 3, 4).expect("read"), b"3456");
        let e = read_at(path, 8, 4).expect_err("past the end");
        assert!(e.contains("ends before byte 12"), "{e}");
        let mut rest = String::new();
        open(path, 7)
            .expect("open")
            .read_to_string(&mut rest)
            .expect("read");
        assert_eq!(rest, "789");
        assert!(is_object("s3://b/k") && !is_object("data/s3://"));
    }
}
