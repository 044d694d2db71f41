-- Nexmark q17 (auction statistics report) as SQL: per auction and day, the
-- number of bids in three price ranges and the price's min, max, average
-- and sum. The suite's query as written (the generator names the event
-- time `date_time`). It aggregates without a window, so its result
-- updates: the sink receives a changelog, each row's kind in `op` (+I a
-- new auction-day, -U its previous figures, +U its new ones); apply the
-- changes in order for the current table, or write them with
-- `postgres-sink` (`mode = "upsert"`, `op_column = "op"`).
--
--   cargo run --release -- run examples/nexmark/q17.sql
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

CREATE TABLE nexmark_q17 (
  auction BIGINT,
  `day` VARCHAR,
  total_bids BIGINT,
  rank1_bids BIGINT,
  rank2_bids BIGINT,
  rank3_bids BIGINT,
  min_price BIGINT,
  max_price BIGINT,
  avg_price BIGINT,
  sum_price BIGINT
) WITH (
  'connector' = 'file-sink',
  'allow_write' = 'out',
  'config.path' = 'out/q17',
  'config.format' = 'jsonl'
);

INSERT INTO nexmark_q17
SELECT
     auction,
     DATE_FORMAT(date_time, 'yyyy-MM-dd') as `day`,
     count(*) AS total_bids,
     count(*) filter (where price < 10000) AS rank1_bids,
     count(*) filter (where price >= 10000 and price < 1000000) AS rank2_bids,
     count(*) filter (where price >= 1000000) AS rank3_bids,
     min(price) AS min_price,
     max(price) AS max_price,
     avg(price) AS avg_price,
     sum(price) AS sum_price
FROM bid
GROUP BY auction, DATE_FORMAT(date_time, 'yyyy-MM-dd');
