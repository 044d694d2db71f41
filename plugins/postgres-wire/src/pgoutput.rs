//! The messages of `pgoutput`, PostgreSQL's logical decoding output
//! plugin (protocol version 1): transactions, relation descriptions and
//! the row changes within them, values in text form.
//!
//! It owns decoding one message from the bytes of one `XLogData`; it must
//! never trust a count or a length the bytes claim beyond the bytes there.

use bytes::{Buf, Bytes};

use crate::Error;
use crate::replication::Lsn;

/// One column of a [`Relation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    /// Part of the replica identity (the primary key, by default).
    pub key: bool,
    /// The column's name.
    pub name: String,
    /// Its type's OID.
    pub type_oid: u32,
}

/// A table's description, sent before the first change of it in a session
/// and again when it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// The table's OID.
    pub oid: u32,
    /// Its schema.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its columns, in order.
    pub columns: Vec<RelationColumn>,
}

/// One value of a [`Tuple`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Datum {
    /// SQL NULL.
    Null,
    /// A TOASTed value the change left as it was (not sent).
    Unchanged,
    /// The value in text form.
    Text(Bytes),
}

/// A row image.
pub type Tuple = Vec<Datum>;

/// One pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A transaction starts; it will commit at `final_lsn`.
    Begin {
        /// The LSN of its commit record.
        final_lsn: Lsn,
        /// Its id.
        xid: u32,
    },
    /// The transaction commits.
    Commit {
        /// The LSN of its commit record.
        commit_lsn: Lsn,
        /// The end of its commit record: where a restart resumes after it.
        end_lsn: Lsn,
    },
    /// A table's description.
    Relation(Relation),
    /// A row was inserted.
    Insert {
        /// The table.
        relation: u32,
        /// The new row.
        new: Tuple,
    },
    /// A row was updated.
    Update {
        /// The table.
        relation: u32,
        /// The old key (`K`) or whole old row (`O`, with REPLICA IDENTITY
        /// FULL) when the key changed or the identity is full.
        old: Option<Tuple>,
        /// The new row.
        new: Tuple,
    },
    /// A row was deleted.
    Delete {
        /// The table.
        relation: u32,
        /// Its key (`K`; other columns null) or whole row (`O`).
        old: Tuple,
    },
    /// Tables were truncated.
    Truncate {
        /// The tables.
        relations: Vec<u32>,
    },
    /// Anything else (origin, type, logical message): not needed here.
    Other(u8),
}

fn short(what: &str) -> Error {
    Error::Protocol(format!("a truncated pgoutput {what} message"))
}

fn need(buf: &Bytes, n: usize, what: &str) -> Result<(), Error> {
    if buf.remaining() < n {
        return Err(short(what));
    }
    Ok(())
}

fn cstring(buf: &mut Bytes, what: &str) -> Result<String, Error> {
    let end = buf
        .iter()
        .position(|b| *b == 0)
        .ok_or_else(|| short(what))?;
    let s = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.advance(end + 1);
    Ok(s)
}

fn tuple(buf: &mut Bytes, what: &str) -> Result<Tuple, Error> {
    need(buf, 2, what)?;
    let n = buf.get_u16() as usize;
    // Each value takes at least one byte: refuse a count the bytes cannot hold.
    need(buf, n, what)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        need(buf, 1, what)?;
        out.push(match buf.get_u8() {
            b'n' => Datum::Null,
            b'u' => Datum::Unchanged,
            b't' | b'b' => {
                need(buf, 4, what)?;
                let len = buf.get_u32() as usize;
                need(buf, len, what)?;
                Datum::Text(buf.split_to(len))
            }
            other => {
                return Err(Error::Protocol(format!(
                    "an unknown value kind `{}` in a pgoutput {what} message",
                    other as char
                )));
            }
        });
    }
    Ok(out)
}

/// Decode one message.
pub fn parse(mut buf: Bytes) -> Result<Message, Error> {
    need(&buf, 1, "")?;
    let tag = buf.get_u8();
    Ok(match tag {
        b'B' => {
            need(&buf, 20, "begin")?;
            let final_lsn = Lsn(buf.get_u64());
            let _committed_at = buf.get_i64();
            Message::Begin {
                final_lsn,
                xid: buf.get_u32(),
            }
        }
        b'C' => {
            need(&buf, 25, "commit")?;
            let _flags = buf.get_u8();
            let commit_lsn = Lsn(buf.get_u64());
            let end_lsn = Lsn(buf.get_u64());
            Message::Commit {
                commit_lsn,
                end_lsn,
            }
        }
        b'R' => {
            need(&buf, 4, "relation")?;
            let oid = buf.get_u32();
            let namespace = cstring(&mut buf, "relation")?;
            let name = cstring(&mut buf, "relation")?;
            need(&buf, 3, "relation")?;
            let _identity = buf.get_u8();
            let n = buf.get_u16() as usize;
            need(&buf, n, "relation")?;
            let mut columns = Vec::with_capacity(n);
            for _ in 0..n {
                need(&buf, 1, "relation")?;
                let flags = buf.get_u8();
                let name = cstring(&mut buf, "relation")?;
                need(&buf, 8, "relation")?;
                let type_oid = buf.get_u32();
                let _typmod = buf.get_i32();
                columns.push(RelationColumn {
                    key: flags & 1 == 1,
                    name,
                    type_oid,
                });
            }
            Message::Relation(Relation {
                oid,
                namespace,
                name,
                columns,
            })
        }
        b'I' => {
            need(&buf, 5, "insert")?;
            let relation = buf.get_u32();
            if buf.get_u8() != b'N' {
                return Err(short("insert"));
            }
            Message::Insert {
                relation,
                new: tuple(&mut buf, "insert")?,
            }
        }
        b'U' => {
            need(&buf, 5, "update")?;
            let relation = buf.get_u32();
            let mut old = None;
            let mut kind = buf.get_u8();
            if kind == b'K' || kind == b'O' {
                old = Some(tuple(&mut buf, "update")?);
                need(&buf, 1, "update")?;
                kind = buf.get_u8();
            }
            if kind != b'N' {
                return Err(short("update"));
            }
            Message::Update {
                relation,
                old,
                new: tuple(&mut buf, "update")?,
            }
        }
        b'D' => {
            need(&buf, 5, "delete")?;
            let relation = buf.get_u32();
            match buf.get_u8() {
                b'K' | b'O' => {}
                _ => return Err(short("delete")),
            }
            Message::Delete {
                relation,
                old: tuple(&mut buf, "delete")?,
            }
        }
        b'T' => {
            need(&buf, 5, "truncate")?;
            let n = buf.get_u32() as usize;
            let _options = buf.get_u8();
            need(&buf, n.saturating_mul(4), "truncate")?;
            Message::Truncate {
                relations: (0..n).map(|_| buf.get_u32()).collect(),
            }
        }
        other => Message::Other(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};

    fn put_tuple(b: &mut BytesMut, values: &[Option<&str>]) {
        b.put_u16(values.len() as u16);
        for v in values {
            match v {
                None => b.put_u8(b'n'),
                Some(t) => {
                    b.put_u8(b't');
                    b.put_u32(t.len() as u32);
                    b.put_slice(t.as_bytes());
                }
            }
        }
    }

    #[test]
    fn relations_and_changes_decode() {
        let mut b = BytesMut::new();
        b.put_u8(b'R');
        b.put_u32(16384);
        b.put_slice(b"public\0accounts\0");
        b.put_u8(b'd');
        b.put_u16(2);
        b.put_u8(1);
        b.put_slice(b"id\0");
        b.put_u32(23);
        b.put_i32(-1);
        b.put_u8(0);
        b.put_slice(b"name\0");
        b.put_u32(25);
        b.put_i32(-1);
        let Message::Relation(r) = parse(b.freeze()).expect("a relation") else {
            panic!("not a relation");
        };
        assert_eq!(
            (r.oid, r.name.as_str(), r.columns.len()),
            (16384, "accounts", 2)
        );
        assert!(r.columns[0].key && !r.columns[1].key);

        let mut b = BytesMut::new();
        b.put_u8(b'U');
        b.put_u32(16384);
        b.put_u8(b'K');
        put_tuple(&mut b, &[Some("1"), None]);
        b.put_u8(b'N');
        put_tuple(&mut b, &[Some("2"), Some("ann")]);
        assert_eq!(
            parse(b.freeze()).expect("an update"),
            Message::Update {
                relation: 16384,
                old: Some(vec![Datum::Text(Bytes::from_static(b"1")), Datum::Null]),
                new: vec![
                    Datum::Text(Bytes::from_static(b"2")),
                    Datum::Text(Bytes::from_static(b"ann"))
                ],
            }
        );
    }

    #[test]
    fn claims_beyond_the_bytes_are_refused() {
        // An insert claiming 60,000 values in 3 bytes, a value claiming 4 GiB.
        let mut b = BytesMut::new();
        b.put_u8(b'I');
        b.put_u32(1);
        b.put_u8(b'N');
        b.put_u16(60_000);
        b.put_slice(b"nnn");
        assert!(parse(b.freeze()).is_err());
        let mut b = BytesMut::new();
        b.put_u8(b'I');
        b.put_u32(1);
        b.put_u8(b'N');
        b.put_u16(1);
        b.put_u8(b't');
        b.put_u32(u32::MAX);
        assert!(parse(b.freeze()).is_err());
        for truncated in [&b"B"[..], b"C\0", b"R\0\0\0\x01public", b"T\0\0\0\x09\0"] {
            assert!(
                parse(Bytes::copy_from_slice(truncated)).is_err(),
                "{truncated:?}"
            );
        }
    }
}
