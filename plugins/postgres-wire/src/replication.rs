//! The streaming half of a logical replication session: `START_REPLICATION`
//! on a connection opened with `replication=database`, the WAL data and
//! keepalives the server sends in `CopyData`, and the standby status
//! updates that tell it how far the client has durably consumed.
//!
//! It owns framing only: what the WAL data says is [`crate::pgoutput`]'s.
//! It must never report a position as flushed that its caller has not.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::message::frontend;

use crate::{Client, Error, ServerError};

/// A WAL position (`pg_lsn`), shown `X/Y` as the server shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Lsn(pub u64);

impl std::fmt::Display for Lsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

impl std::str::FromStr for Lsn {
    type Err = String;

    fn from_str(s: &str) -> Result<Lsn, String> {
        let (hi, lo) = s
            .split_once('/')
            .ok_or_else(|| format!("`{s}` is not an LSN (X/Y)"))?;
        let part =
            |p: &str| u32::from_str_radix(p, 16).map_err(|_| format!("`{s}` is not an LSN (X/Y)"));
        Ok(Lsn((u64::from(part(hi)?) << 32) | u64::from(part(lo)?)))
    }
}

/// One message of the replication stream.
#[derive(Debug)]
pub enum ReplicationMessage {
    /// WAL data from `start` (a pgoutput message for logical replication).
    XLogData {
        /// Where this data starts in the WAL.
        start: Lsn,
        /// The end of the WAL the server has.
        end: Lsn,
        /// The output plugin's message.
        data: Bytes,
    },
    /// The server is alive; `reply`: it wants a status update now.
    Keepalive {
        /// The end of the WAL the server has.
        end: Lsn,
        /// Whether to answer at once.
        reply: bool,
    },
}

/// A replication session that has started streaming.
pub struct ReplicationStream {
    client: Client,
}

/// Microseconds since 2000-01-01, the protocol's clock.
fn pg_now() -> i64 {
    const UNIX_TO_PG_SECS: i64 = 946_684_800;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_micros() as i64) - UNIX_TO_PG_SECS * 1_000_000
}

impl Client {
    /// `START_REPLICATION SLOT … LOGICAL …` with `options` (already
    /// formatted, e.g. `("proto_version" '1', "publication_names" 'p')`);
    /// reads are then bounded by `poll` (the socket's read timeout).
    pub fn start_replication(
        mut self,
        slot: &str,
        from: Lsn,
        options: &str,
        poll: std::time::Duration,
    ) -> Result<ReplicationStream, Error> {
        let sql = format!(
            "START_REPLICATION SLOT {} LOGICAL {from} {options}",
            crate::quote_ident(slot)
        );
        frontend::query(&sql, &mut self.write).map_err(|source| Error::Io {
            context: "encoding START_REPLICATION",
            source,
        })?;
        self.flush("sending START_REPLICATION")?;
        let mut failure: Option<ServerError> = None;
        loop {
            let Some((tag, body)) = self.receive_frame()? else {
                continue;
            };
            match tag {
                // CopyBothResponse: streaming.
                b'W' if failure.is_none() => break,
                b'E' => failure = Some(parse_error(body)),
                b'Z' => {
                    return Err(Error::Server(failure.unwrap_or_else(|| ServerError {
                        severity: "ERROR".into(),
                        code: "XX000".into(),
                        message: "START_REPLICATION ended without streaming".into(),
                        detail: None,
                        hint: None,
                    })));
                }
                // Notices and parameter changes.
                b'N' | b'S' => {}
                other => {
                    return Err(Error::Protocol(format!(
                        "an unexpected message `{}` after START_REPLICATION",
                        other as char
                    )));
                }
            }
        }
        self.set_read_timeout(Some(poll))?;
        Ok(ReplicationStream { client: self })
    }
}

impl ReplicationStream {
    /// The next message, or `None` when none came within the poll time.
    pub fn receive(&mut self) -> Result<Option<ReplicationMessage>, Error> {
        loop {
            let Some((tag, mut body)) = self.client.receive_frame()? else {
                return Ok(None);
            };
            match tag {
                b'd' => {
                    let short = || Error::Protocol("a truncated replication message".into());
                    if body.is_empty() {
                        return Err(short());
                    }
                    match body.get_u8() {
                        b'w' => {
                            if body.len() < 24 {
                                return Err(short());
                            }
                            let start = Lsn(body.get_u64());
                            let end = Lsn(body.get_u64());
                            let _sent_at = body.get_i64();
                            return Ok(Some(ReplicationMessage::XLogData {
                                start,
                                end,
                                data: body,
                            }));
                        }
                        b'k' => {
                            if body.len() < 17 {
                                return Err(short());
                            }
                            let end = Lsn(body.get_u64());
                            let _sent_at = body.get_i64();
                            let reply = body.get_u8() == 1;
                            return Ok(Some(ReplicationMessage::Keepalive { end, reply }));
                        }
                        other => {
                            return Err(Error::Protocol(format!(
                                "an unknown replication message `{}`",
                                other as char
                            )));
                        }
                    }
                }
                b'E' => return Err(Error::Server(parse_error(body))),
                b'c' => {
                    return Err(Error::Protocol(
                        "the server ended the replication stream".into(),
                    ));
                }
                b'N' | b'S' => {}
                other => {
                    return Err(Error::Protocol(format!(
                        "an unexpected message `{}` in the replication stream",
                        other as char
                    )));
                }
            }
        }
    }

    /// Tell the server everything up to `flushed` is durably consumed:
    /// it may drop that WAL and restart the slot from there; `reply`: ask
    /// for a keepalive at once (it says how far the server has sent).
    pub fn send_status(&mut self, flushed: Lsn, reply: bool) -> Result<(), Error> {
        let mut body = BytesMut::with_capacity(34);
        body.put_u8(b'r');
        body.put_u64(flushed.0); // written
        body.put_u64(flushed.0); // flushed
        body.put_u64(flushed.0); // applied
        body.put_i64(pg_now());
        body.put_u8(u8::from(reply));
        frontend::CopyData::new(&body[..])
            .map_err(|source| Error::Io {
                context: "encoding a status update",
                source,
            })?
            .write(&mut self.client.write);
        self.client.flush("sending a status update")
    }
}

/// An `ErrorResponse` body's fields.
fn parse_error(mut body: Bytes) -> ServerError {
    let mut e = ServerError::empty();
    while body.has_remaining() {
        let field = body.get_u8();
        if field == 0 {
            break;
        }
        let end = body.iter().position(|b| *b == 0).unwrap_or(body.len());
        e.set(field, String::from_utf8_lossy(&body[..end]).into_owned());
        body.advance((end + 1).min(body.len()));
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_read_and_print_as_the_server_writes_them() {
        let lsn: Lsn = "16/B374D848".parse().expect("an LSN");
        assert_eq!(lsn, Lsn(0x16_B374_D848));
        assert_eq!(lsn.to_string(), "16/B374D848");
        assert_eq!("0/0".parse::<Lsn>(), Ok(Lsn(0)));
        for bad in ["", "16", "x/1", "1/", "1/2/3"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad}");
        }
    }

    #[test]
    fn error_fields_are_read_until_their_terminator() {
        let body = Bytes::from_static(b"SERROR\0C42704\0Mno slot\0Dgone\0\0");
        let e = parse_error(body);
        assert_eq!(
            (e.severity.as_str(), e.code.as_str(), e.message.as_str()),
            ("ERROR", "42704", "no slot")
        );
        assert_eq!(e.detail.as_deref(), Some("gone"));
    }
}
