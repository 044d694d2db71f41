-- Nexmark q0 (pass-through) as SQL: the suite's query over fvhost's
-- generator. Two differences from nexmark-flink's text: the generator calls
-- the event time `date_time` (not `dateTime`) and has no `extra` column.
--
--   cargo run --release -- run examples/nexmark/q0.sql
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

CREATE TABLE nexmark_q0 (
  auction BIGINT,
  bidder BIGINT,
  price BIGINT,
  date_time TIMESTAMP(3)
) WITH ('connector' = 'blackhole-sink');

INSERT INTO nexmark_q0
SELECT auction, bidder, price, date_time FROM bid;
