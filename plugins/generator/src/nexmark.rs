//! The Nexmark event model: which event a number is, and its fields.
//!
//! Follows the reference generator's constants and id arithmetic so that
//! queries see the same shape of data (hot keys, id leads, price spread).

use std::fmt::Write;
use std::sync::Arc;

use fv_plugin_sdk::arrow_array::builder::{
    Int64Builder, StringBuilder, TimestampMillisecondBuilder,
};
use fv_plugin_sdk::arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use fv_plugin_sdk::arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::Stream;
use crate::rng::Rng;

const PERSON_PROPORTION: u64 = 1;
const AUCTION_PROPORTION: u64 = 3;
const BID_PROPORTION: u64 = 46;
const PROPORTION_DENOMINATOR: u64 = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION;
const FIRST_PERSON_ID: u64 = 1000;
const FIRST_AUCTION_ID: u64 = 1000;
const FIRST_CATEGORY_ID: u64 = 10;
const NUM_CATEGORIES: u64 = 5;
const PERSON_ID_LEAD: u64 = 10;
const AUCTION_ID_LEAD: u64 = 10;
const HOT_SELLER_RATIO: u64 = 100;
const HOT_AUCTION_RATIO: u64 = 100;
const HOT_BIDDER_RATIO: u64 = 100;
const NUM_ACTIVE_PEOPLE: u64 = 1000;
const NUM_IN_FLIGHT_AUCTIONS: u64 = 100;
const FIRST_NAMES: &[&str] = &[
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: &[&str] = &[
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];
const US_STATES: &[&str] = &["AZ", "CA", "ID", "OR", "WA", "WY"];
const US_CITIES: &[&str] = &[
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const HOT_CHANNELS: &[&str] = &["Google", "Facebook", "Baidu", "Apple"];
/// The URL of each hot channel (its name in lowercase).
const HOT_URLS: &[&str] = &[
    "https://www.nexmark.com/google/item.htm?query=1",
    "https://www.nexmark.com/facebook/item.htm?query=1",
    "https://www.nexmark.com/baidu/item.htm?query=1",
    "https://www.nexmark.com/apple/item.htm?query=1",
];

/// Generation parameters shared by every event.
pub struct Params {
    pub seed: u64,
    pub base_time: i64,
    pub inter_event_delay_us: f64,
}

impl Params {
    fn timestamp(&self, event: u64) -> i64 {
        self.base_time + (event as f64 * self.inter_event_delay_us / 1000.0) as i64
    }
}

fn kind_of(event: u64) -> Stream {
    let rem = event % PROPORTION_DENOMINATOR;
    if rem < PERSON_PROPORTION {
        Stream::Person
    } else if rem < PERSON_PROPORTION + AUCTION_PROPORTION {
        Stream::Auction
    } else {
        Stream::Bid
    }
}

fn last_base0_person_id(event: u64) -> u64 {
    let epoch = event / PROPORTION_DENOMINATOR;
    // The reference generator's formula; with one person per epoch the
    // offset is always 0, but the proportions are constants one may tune.
    let offset = event % PROPORTION_DENOMINATOR;
    let offset = if offset >= PERSON_PROPORTION {
        PERSON_PROPORTION - 1
    } else {
        offset
    };
    epoch * PERSON_PROPORTION + offset
}

fn last_base0_auction_id(event: u64) -> u64 {
    let mut epoch = event / PROPORTION_DENOMINATOR;
    let mut offset = event % PROPORTION_DENOMINATOR;
    if offset < PERSON_PROPORTION {
        // Before this epoch's first auction: the last auction of the previous epoch.
        if epoch == 0 {
            return 0;
        }
        epoch -= 1;
        offset = AUCTION_PROPORTION - 1;
    } else if offset >= PERSON_PROPORTION + AUCTION_PROPORTION {
        offset = AUCTION_PROPORTION - 1;
    } else {
        offset -= PERSON_PROPORTION;
    }
    epoch * AUCTION_PROPORTION + offset
}

fn next_base0_person_id(event: u64, rng: &mut Rng) -> u64 {
    let num_people = last_base0_person_id(event) + 1;
    let active = num_people.min(NUM_ACTIVE_PEOPLE);
    let n = rng.below(active + PERSON_ID_LEAD);
    num_people - active + n
}

fn next_base0_auction_id(event: u64, rng: &mut Rng) -> u64 {
    let max_auction = last_base0_auction_id(event);
    let min_auction = max_auction.saturating_sub(NUM_IN_FLIGHT_AUCTIONS);
    min_auction + rng.below(max_auction - min_auction + 1 + AUCTION_ID_LEAD)
}

fn next_price(rng: &mut Rng) -> i64 {
    (10f64.powf(rng.unit() * 6.0) * 100.0).round() as i64
}

/// The Arrow schema of one stream.
pub fn schema(stream: Stream) -> SchemaRef {
    let ts = || DataType::Timestamp(TimeUnit::Millisecond, None);
    let fields = match stream {
        Stream::Person => vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("email_address", DataType::Utf8, false),
            Field::new("credit_card", DataType::Utf8, false),
            Field::new("city", DataType::Utf8, false),
            Field::new("state", DataType::Utf8, false),
            Field::new("date_time", ts(), false),
        ],
        Stream::Auction => vec![
            Field::new("id", DataType::Int64, false),
            Field::new("item_name", DataType::Utf8, false),
            Field::new("description", DataType::Utf8, false),
            Field::new("initial_bid", DataType::Int64, false),
            Field::new("reserve", DataType::Int64, false),
            Field::new("date_time", ts(), false),
            Field::new("expires", ts(), false),
            Field::new("seller", DataType::Int64, false),
            Field::new("category", DataType::Int64, false),
        ],
        Stream::Bid => vec![
            Field::new("auction", DataType::Int64, false),
            Field::new("bidder", DataType::Int64, false),
            Field::new("price", DataType::Int64, false),
            Field::new("channel", DataType::Utf8, false),
            Field::new("url", DataType::Utf8, false),
            Field::new("date_time", ts(), false),
        ],
        Stream::Sequence => vec![
            Field::new("seq", DataType::Int64, false),
            Field::new("ts", ts(), false),
        ],
    };
    Arc::new(Schema::new(fields))
}

/// Column builders for one batch of one stream.
pub struct BatchBuilder {
    stream: Stream,
    /// Per field of the full schema: whether the batch carries it.
    keep: Vec<bool>,
    /// Rows pushed (a batch of no columns still has rows).
    rows: usize,
    ints: Vec<Int64Builder>,
    strings: Vec<StringBuilder>,
    times: Vec<TimestampMillisecondBuilder>,
}

impl BatchBuilder {
    /// Builders sized for `capacity` rows.
    /// `keep` says, per field of [`schema`]`(stream)`, whether the batch
    /// carries it (a projection); columns left out are not built where
    /// that saves work (the bid's strings), and dropped otherwise.
    pub fn new(stream: Stream, capacity: usize, keep: &[bool]) -> Self {
        let (ints, strings, times) = match stream {
            Stream::Person => (1, 5, 1),
            Stream::Auction => (5, 2, 2),
            Stream::Bid => (3, 2, 1),
            Stream::Sequence => (1, 0, 1),
        };
        BatchBuilder {
            stream,
            keep: keep.to_vec(),
            rows: 0,
            ints: (0..ints)
                .map(|_| Int64Builder::with_capacity(capacity))
                .collect(),
            strings: (0..strings)
                .map(|_| StringBuilder::with_capacity(capacity, capacity * 16))
                .collect(),
            times: (0..times)
                .map(|_| TimestampMillisecondBuilder::with_capacity(capacity))
                .collect(),
        }
    }

    /// Add event `event` if it belongs to this stream; returns whether it did.
    pub fn push(&mut self, p: &Params, event: u64) -> bool {
        let ts = p.timestamp(event);
        if self.stream == Stream::Sequence {
            self.rows += 1;
            self.ints[0].append_value(event as i64);
            self.times[0].append_value(ts);
            return true;
        }
        if kind_of(event) != self.stream {
            return false;
        }
        self.rows += 1;
        let mut rng = Rng::for_event(p.seed, event);
        match self.stream {
            Stream::Person => {
                let id = last_base0_person_id(event) + FIRST_PERSON_ID;
                self.ints[0].append_value(id as i64);
                let first = FIRST_NAMES[rng.below(FIRST_NAMES.len() as u64) as usize];
                let last = LAST_NAMES[rng.below(LAST_NAMES.len() as u64) as usize];
                self.strings[0].append_value(format!("{first} {last}"));
                self.strings[1].append_value(format!("{}@{}.com", rng.string(7), rng.string(5)));
                let card: Vec<String> = (0..4)
                    .map(|_| format!("{:04}", rng.below(10_000)))
                    .collect();
                self.strings[2].append_value(card.join(" "));
                self.strings[3].append_value(US_CITIES[rng.below(US_CITIES.len() as u64) as usize]);
                self.strings[4].append_value(US_STATES[rng.below(US_STATES.len() as u64) as usize]);
                self.times[0].append_value(ts);
            }
            Stream::Auction => {
                let id = last_base0_auction_id(event) + FIRST_AUCTION_ID;
                let seller = if rng.below(HOT_SELLER_RATIO) > 0 {
                    (last_base0_person_id(event) / HOT_SELLER_RATIO) * HOT_SELLER_RATIO
                } else {
                    next_base0_person_id(event, &mut rng)
                } + FIRST_PERSON_ID;
                let category = FIRST_CATEGORY_ID + rng.below(NUM_CATEGORIES);
                let initial_bid = next_price(&mut rng);
                let reserve = initial_bid + next_price(&mut rng);
                // Auctions run until roughly twice the time it takes for
                // `NUM_IN_FLIGHT_AUCTIONS` more auctions to appear.
                let events_for_auctions =
                    NUM_IN_FLIGHT_AUCTIONS * PROPORTION_DENOMINATOR / AUCTION_PROPORTION;
                let horizon_ms = p.timestamp(event + events_for_auctions) - ts;
                let length = 1 + rng.below((horizon_ms.max(1) * 2) as u64) as i64;
                self.ints[0].append_value(id as i64);
                self.strings[0].append_value(rng.string(20));
                self.strings[1].append_value(rng.string(100));
                self.ints[1].append_value(initial_bid);
                self.ints[2].append_value(reserve);
                self.times[0].append_value(ts);
                self.times[1].append_value(ts + length);
                self.ints[3].append_value(seller as i64);
                self.ints[4].append_value(category as i64);
            }
            Stream::Bid => {
                let auction = if rng.below(HOT_AUCTION_RATIO) > 0 {
                    (last_base0_auction_id(event) / HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
                } else {
                    next_base0_auction_id(event, &mut rng)
                } + FIRST_AUCTION_ID;
                let bidder = if rng.below(HOT_BIDDER_RATIO) > 0 {
                    (last_base0_person_id(event) / HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
                } else {
                    next_base0_person_id(event, &mut rng)
                } + FIRST_PERSON_ID;
                let price = next_price(&mut rng);
                // Strings are written straight into the builders (a
                // builder's `fmt::Write` appends to the row in progress):
                // no allocation per row.
                // A column left out of the projection is not written, but
                // its random draws are: later events must not change.
                let (channel, url) = (self.keep[3], self.keep[4]);
                if rng.below(2) > 0 {
                    let i = rng.below(HOT_CHANNELS.len() as u64) as usize;
                    if channel {
                        self.strings[0].append_value(HOT_CHANNELS[i]);
                    }
                    if url {
                        self.strings[1].append_value(HOT_URLS[i]);
                    }
                } else {
                    let c = rng.below(10_000);
                    if channel {
                        let _ = write!(self.strings[0], "channel-{c}");
                        self.strings[0].append_value("");
                    }
                    if url {
                        let url = &mut self.strings[1];
                        let _ = url.write_str("https://www.nexmark.com/");
                        rng.write_string(5, url);
                        let _ = write!(url, "/item.htm?query=1&channel_id={c}");
                        url.append_value("");
                    } else {
                        rng.skip(5);
                    }
                }
                self.ints[0].append_value(auction as i64);
                self.ints[1].append_value(bidder as i64);
                self.ints[2].append_value(price);
                self.times[0].append_value(ts);
            }
            Stream::Sequence => {}
        }
        true
    }

    /// The batch of everything pushed, with the kept fields of the full
    /// schema `full` (`projected` is that schema's projection).
    pub fn finish(
        mut self,
        full: &SchemaRef,
        projected: &SchemaRef,
    ) -> Result<RecordBatch, ArrowError> {
        let mut ints = self
            .ints
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef);
        let mut strings = self
            .strings
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef);
        let mut times = self
            .times
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef);
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(projected.fields().len());
        for (field, keep) in full.fields().iter().zip(&self.keep) {
            let next = match field.data_type() {
                DataType::Int64 => ints.next(),
                DataType::Utf8 => strings.next(),
                _ => times.next(),
            };
            let column =
                next.ok_or_else(|| ArrowError::SchemaError("column builder mismatch".into()))?;
            if *keep {
                columns.push(column);
            }
        }
        let options = RecordBatchOptions::new().with_row_count(Some(self.rows));
        RecordBatch::try_new_with_options(Arc::clone(projected), columns, &options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportions_follow_nexmark() {
        let kinds: Vec<Stream> = (0..50).map(kind_of).collect();
        assert_eq!(kinds.iter().filter(|k| **k == Stream::Person).count(), 1);
        assert_eq!(kinds.iter().filter(|k| **k == Stream::Auction).count(), 3);
        assert_eq!(kinds.iter().filter(|k| **k == Stream::Bid).count(), 46);
    }

    #[test]
    fn auction_ids_are_dense() {
        let ids: Vec<u64> = (0..200)
            .filter(|e| kind_of(*e) == Stream::Auction)
            .map(last_base0_auction_id)
            .collect();
        let expected: Vec<u64> = (0..ids.len() as u64).collect();
        assert_eq!(ids, expected);
    }

    /// A projection drops columns without changing any value of the
    /// columns kept (the skipped strings still consume their draws).
    #[test]
    fn a_projected_batch_is_the_full_batch_without_the_other_columns() {
        let p = Params {
            seed: 7,
            base_time: 0,
            inter_event_delay_us: 100.0,
        };
        for stream in [Stream::Bid, Stream::Auction, Stream::Person] {
            let full = schema(stream);
            let build = |keep: &[bool]| {
                let indices: Vec<usize> = (0..keep.len()).filter(|i| keep[*i]).collect();
                let projected = Arc::new(full.project(&indices).expect("projection"));
                let mut b = BatchBuilder::new(stream, 64, keep);
                for event in 0..3000 {
                    b.push(&p, event);
                }
                b.finish(&full, &projected).expect("batch")
            };
            let all = build(&vec![true; full.fields().len()]);
            // Keep the first and the last column only.
            let mut keep = vec![false; full.fields().len()];
            keep[0] = true;
            *keep.last_mut().expect("fields") = true;
            let some = build(&keep);
            let last = full.fields().len() - 1;
            assert_eq!(some.num_columns(), 2);
            assert_eq!(some.column(0), all.column(0), "{stream:?}");
            assert_eq!(some.column(1), all.column(last), "{stream:?}");
            let none = build(&vec![false; full.fields().len()]);
            assert_eq!((none.num_columns(), none.num_rows()), (0, all.num_rows()));
        }
    }
}
