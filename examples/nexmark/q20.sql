-- Nexmark q20 (expand bid with auction) as SQL: every bid on an auction of
-- category 10, with the auction's columns. The suite's query as written
-- (the generator names the event time `date_time` and has no `extra`).
-- Its join has no time condition, so it is unbounded: every auction and
-- every bid stay in the join's state for as long as the topology runs —
-- fine for this bounded run; over an endless stream, bound it
-- (`AND B.date_time BETWEEN A.date_time AND A.expires`).
--
--   cargo run --release -- run examples/nexmark/q20.sql
CREATE TABLE bid (
  auction BIGINT,
  bidder BIGINT,
  price BIGINT,
  channel VARCHAR,
  url VARCHAR,
  date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
  'connector' = 'generator',
  'config.stream' = 'bid',
  'config.events' = 1000000
);

CREATE TABLE auction (
  id BIGINT,
  item_name VARCHAR,
  description VARCHAR,
  initial_bid BIGINT,
  reserve BIGINT,
  date_time TIMESTAMP(3),
  expires TIMESTAMP(3),
  seller BIGINT,
  category BIGINT,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
  'connector' = 'generator',
  'config.stream' = 'auction',
  'config.events' = 1000000
);

CREATE TABLE nexmark_q20 (
  auction BIGINT,
  bidder BIGINT,
  price BIGINT,
  channel VARCHAR,
  url VARCHAR,
  bid_date_time TIMESTAMP(3),
  item_name VARCHAR,
  description VARCHAR,
  initial_bid BIGINT,
  reserve BIGINT,
  auction_date_time TIMESTAMP(3),
  expires TIMESTAMP(3),
  seller BIGINT,
  category BIGINT
) WITH (
  'connector' = 'file-sink',
  'allow_write' = 'out',
  'config.path' = 'out/q20',
  'config.format' = 'jsonl'
);

INSERT INTO nexmark_q20
SELECT
    auction, bidder, price, channel, url, B.date_time,
    item_name, description, initial_bid, reserve, A.date_time, expires, seller, category
FROM
    bid AS B INNER JOIN auction AS A on B.auction = A.id
WHERE A.category = 10;
