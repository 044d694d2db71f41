-- Nexmark q2 (selection) as SQL: bids on a set of auctions. The suite's
-- query as written (Flink's MOD is the % operator). The WHERE reaches the
-- generator like any SQL stage's filter.
--
--   cargo run --release -- run examples/nexmark/q2.sql
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

CREATE TABLE nexmark_q2 (
  auction BIGINT,
  price BIGINT
) WITH ('connector' = 'blackhole-sink');

INSERT INTO nexmark_q2
SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0;
