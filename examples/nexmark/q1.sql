-- Nexmark q1 (currency conversion) as SQL: every bid with its price in
-- euros. The suite's query, with `date_time` for `dateTime` and without
-- `extra` (the generator has none).
--
--   cargo run --release -- run examples/nexmark/q1.sql
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

CREATE TABLE nexmark_q1 (
  auction BIGINT,
  bidder BIGINT,
  price DOUBLE,
  date_time TIMESTAMP(3)
) WITH ('connector' = 'blackhole-sink');

INSERT INTO nexmark_q1
SELECT
    auction,
    bidder,
    0.908 * price as price,
    date_time
FROM bid;
