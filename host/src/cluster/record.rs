//! How an in-band [`Message`] travels as a record of an exchange topic.
//!
//! A record's value is the Arrow IPC stream of a batch (empty for control
//! records); its one header, `fv`, is a fixed 46-byte layout, big-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | layout version (1) |
//! | 1 | kind: 0 batch, 1 barrier, 2 watermark, 3 idle, 4 end of stream |
//! | 2..10 | generation number |
//! | 10..18 | generation nonce |
//! | 18..22 | producing task |
//! | 22..30 | epoch the record belongs to |
//! | 30..38 | barrier: its epoch; watermark: µs since 1970; batch: when its rows were read, µs since 1970 |
//! | 38..46 | sequence number within the partition and generation, from 1 |
//!
//! The sequence number lets a reader check what the broker's idempotent
//! producer promises, without trusting it: a record written twice (a
//! retried request that had landed) is dropped, and a record missing (a
//! broker that lost or reordered one) fails the run, which restarts from
//! its last committed epoch, rather than count a window short.
//! This module only encodes and decodes; it never talks to a broker.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::epoch::Generation;
use crate::runtime::{Message, Watermark};

/// The header key of every exchange record.
pub const HEADER: &str = "fv";
const VERSION: u8 = 1;
/// Bytes of the `fv` header.
pub const HEADER_LEN: usize = 46;

/// What a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Rows: the value is an Arrow IPC stream.
    Batch,
    /// Barrier of the epoch in `arg`.
    Barrier,
    /// Watermark at `arg` µs.
    Watermark,
    /// The producer is idle.
    Idle,
    /// The producer ended.
    EndOfStream,
}

/// The decoded `fv` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// What the record is.
    pub kind: Kind,
    /// The generation that wrote it.
    pub generation: Generation,
    /// The producing task.
    pub task: u32,
    /// The epoch it belongs to.
    pub epoch: u64,
    /// Kind-specific (see the module doc).
    pub arg: i64,
    /// Its place in the partition's stream of this generation, from 1.
    pub seq: u64,
}

/// Why a record is not an exchange record of this layout.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// No `fv` header, or one of another length.
    #[error("it has no `fv` header of {HEADER_LEN} bytes (not written by fvhost?)")]
    Header,
    /// A layout this host does not know.
    #[error("its `fv` header has layout version {0}; this fvhost reads version {VERSION}")]
    Version(u8),
    /// An unknown kind.
    #[error("its `fv` header has an unknown kind {0}")]
    Kind(u8),
}

impl RecordHeader {
    /// The header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = VERSION;
        b[1] = match self.kind {
            Kind::Batch => 0,
            Kind::Barrier => 1,
            Kind::Watermark => 2,
            Kind::Idle => 3,
            Kind::EndOfStream => 4,
        };
        b[2..10].copy_from_slice(&self.generation.number.to_be_bytes());
        b[10..18].copy_from_slice(&self.generation.nonce.to_be_bytes());
        b[18..22].copy_from_slice(&self.task.to_be_bytes());
        b[22..30].copy_from_slice(&self.epoch.to_be_bytes());
        b[30..38].copy_from_slice(&self.arg.to_be_bytes());
        b[38..46].copy_from_slice(&self.seq.to_be_bytes());
        b
    }

    /// Read header bytes.
    pub fn decode(b: &[u8]) -> Result<RecordHeader, RecordError> {
        let b: &[u8; HEADER_LEN] = b.try_into().map_err(|_| RecordError::Header)?;
        if b[0] != VERSION {
            return Err(RecordError::Version(b[0]));
        }
        let kind = match b[1] {
            0 => Kind::Batch,
            1 => Kind::Barrier,
            2 => Kind::Watermark,
            3 => Kind::Idle,
            4 => Kind::EndOfStream,
            k => return Err(RecordError::Kind(k)),
        };
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            a
        };
        let mut task = [0u8; 4];
        task.copy_from_slice(&b[18..22]);
        Ok(RecordHeader {
            kind,
            generation: Generation {
                number: u64::from_be_bytes(u64_at(2)),
                nonce: u64::from_be_bytes(u64_at(10)),
            },
            task: u32::from_be_bytes(task),
            epoch: u64::from_be_bytes(u64_at(22)),
            arg: i64::from_be_bytes(u64_at(30)),
            seq: u64::from_be_bytes(u64_at(38)),
        })
    }

    /// The header of `message` (a batch's rows travel in the value),
    /// record `seq` of its partition.
    pub fn of(
        message: &Message,
        generation: Generation,
        task: u32,
        epoch: u64,
        seq: u64,
    ) -> RecordHeader {
        let (kind, arg) = match message {
            Message::Batch(_, read_at) => (Kind::Batch, unix_micros(*read_at)),
            Message::Barrier(e) => (Kind::Barrier, *e as i64),
            Message::Watermark(Watermark::At(t)) => (Kind::Watermark, *t),
            Message::Watermark(Watermark::Idle) => (Kind::Idle, 0),
            Message::EndOfStream => (Kind::EndOfStream, 0),
        };
        RecordHeader {
            kind,
            generation,
            task,
            epoch,
            arg,
            seq,
        }
    }

    /// The message of a control record (`None` for a batch: its rows are
    /// in the value).
    pub fn control(&self) -> Option<Message> {
        match self.kind {
            Kind::Batch => None,
            Kind::Barrier => Some(Message::Barrier(self.arg as u64)),
            Kind::Watermark => Some(Message::Watermark(Watermark::At(self.arg))),
            Kind::Idle => Some(Message::Watermark(Watermark::Idle)),
            Kind::EndOfStream => Some(Message::EndOfStream),
        }
    }

    /// When a batch's rows were read, on this process's clock (freshness
    /// is measured from the source's read across members; clocks must
    /// agree for it to be exact, and it is never later than now).
    pub fn read_at(&self) -> Instant {
        let now_instant = Instant::now();
        let now = unix_micros(now_instant);
        let ago = Duration::from_micros(now.saturating_sub(self.arg).max(0) as u64);
        now_instant.checked_sub(ago).unwrap_or(now_instant)
    }
}

/// What a reader does with a record, by its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The next record of this generation: pass it on.
    Deliver,
    /// Written by an older (or another) incarnation: drop it.
    OtherGeneration,
    /// Written twice by a retrying client: drop it.
    Duplicate,
    /// A newer generation writes here: this reader's member was replaced.
    Replaced {
        /// The newer generation's number.
        newer: u64,
    },
    /// Records between the last one and this are missing.
    Gap {
        /// The last record delivered.
        last: u64,
    },
}

/// The records of one generation in one partition, in order and once.
#[derive(Debug, Clone)]
pub struct PartitionFilter {
    generation: Generation,
    last: u64,
}

impl PartitionFilter {
    /// A filter that passes `generation`'s records from the first on.
    pub fn new(generation: Generation) -> Self {
        PartitionFilter {
            generation,
            last: 0,
        }
    }

    /// Judge the next record read.
    pub fn judge(&mut self, header: &RecordHeader) -> Verdict {
        if header.generation != self.generation {
            return match header.generation.number > self.generation.number {
                true => Verdict::Replaced {
                    newer: header.generation.number,
                },
                false => Verdict::OtherGeneration,
            };
        }
        if header.seq <= self.last {
            return Verdict::Duplicate;
        }
        if header.seq != self.last + 1 {
            return Verdict::Gap { last: self.last };
        }
        self.last = header.seq;
        Verdict::Deliver
    }
}

/// `at` as µs since 1970 on the wall clock.
fn unix_micros(at: Instant) -> i64 {
    let now = SystemTime::now();
    let ago = Instant::now().saturating_duration_since(at);
    now.checked_sub(ago)
        .unwrap_or(now)
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_message_round_trips_through_its_header() {
        let generation = Generation {
            number: 7,
            nonce: 0xdead_beef_0bad_f00d,
        };
        for message in [
            Message::Barrier(42),
            Message::Watermark(Watermark::At(-5)),
            Message::Watermark(Watermark::At(i64::MAX)),
            Message::Watermark(Watermark::Idle),
            Message::EndOfStream,
        ] {
            let header = RecordHeader::of(&message, generation, 3, 9, 12);
            let back = RecordHeader::decode(&header.encode()).expect("decode");
            assert_eq!(back, header);
            assert_eq!(back.generation, generation);
            assert_eq!((back.task, back.epoch, back.seq), (3, 9, 12));
            assert_eq!(
                format!("{:?}", back.control()),
                format!("{:?}", Some(message))
            );
        }
    }

    #[test]
    fn a_batch_header_carries_when_its_rows_were_read() {
        let read = Instant::now() - Duration::from_millis(300);
        let batch = arrow::array::RecordBatch::new_empty(std::sync::Arc::new(
            arrow::datatypes::Schema::empty(),
        ));
        let header = RecordHeader::of(
            &Message::Batch(batch, read),
            Generation {
                number: 1,
                nonce: 1,
            },
            0,
            1,
            1,
        );
        let back = RecordHeader::decode(&header.encode()).expect("decode");
        assert_eq!(back.kind, Kind::Batch);
        assert!(back.control().is_none());
        let age = back.read_at().elapsed();
        assert!(
            age >= Duration::from_millis(290) && age < Duration::from_secs(5),
            "{age:?}"
        );
    }

    #[test]
    fn a_partition_passes_its_generation_once_in_order_and_flags_the_rest() {
        let mine = Generation {
            number: 5,
            nonce: 50,
        };
        let at = |generation: Generation, seq: u64| {
            RecordHeader::of(&Message::Barrier(1), generation, 0, 1, seq)
        };
        let mut f = PartitionFilter::new(mine);
        let older = Generation {
            number: 4,
            nonce: 40,
        };
        let same_number_other_store = Generation {
            number: 5,
            nonce: 51,
        };
        assert_eq!(f.judge(&at(older, 7)), Verdict::OtherGeneration);
        assert_eq!(
            f.judge(&at(same_number_other_store, 1)),
            Verdict::OtherGeneration
        );
        assert_eq!(f.judge(&at(mine, 1)), Verdict::Deliver);
        assert_eq!(f.judge(&at(mine, 2)), Verdict::Deliver);
        assert_eq!(
            f.judge(&at(mine, 2)),
            Verdict::Duplicate,
            "a retry landed twice"
        );
        assert_eq!(f.judge(&at(mine, 1)), Verdict::Duplicate);
        assert_eq!(
            f.judge(&at(older, 99)),
            Verdict::OtherGeneration,
            "a zombie's late write"
        );
        assert_eq!(f.judge(&at(mine, 3)), Verdict::Deliver);
        assert_eq!(f.judge(&at(mine, 5)), Verdict::Gap { last: 3 });
        let newer = Generation {
            number: 6,
            nonce: 60,
        };
        assert_eq!(f.judge(&at(newer, 1)), Verdict::Replaced { newer: 6 });
    }

    #[test]
    fn foreign_records_are_refused_with_the_reason() {
        assert!(matches!(
            RecordHeader::decode(b"short"),
            Err(RecordError::Header)
        ));
        let mut b = RecordHeader::of(
            &Message::EndOfStream,
            Generation {
                number: 1,
                nonce: 2,
            },
            0,
            1,
            1,
        )
        .encode();
        b[0] = 9;
        assert!(matches!(
            RecordHeader::decode(&b),
            Err(RecordError::Version(9))
        ));
        b[0] = VERSION;
        b[1] = 77;
        assert!(matches!(
            RecordHeader::decode(&b),
            Err(RecordError::Kind(77))
        ));
    }
}
