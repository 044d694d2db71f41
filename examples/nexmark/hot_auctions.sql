-- Hot auctions as SQL: per hopping window of 10 s every 2 s, the auctions
-- with at least 20 bids and what they fetched. The window table function
-- and GROUP BY become one native window stage keyed by auction; HAVING and
-- the arithmetic a SQL stage after it. Kill it and run it again: it resumes
-- from its last epoch and writes every window exactly once.
--
--   cargo run --release -- run examples/nexmark/hot_auctions.sql
CREATE TABLE bid (
  auction BIGINT,
  price BIGINT,
  date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time
) WITH (
  'connector' = 'generator',
  'config.stream' = 'bid',
  'config.events' = 2000000
);

CREATE TABLE hot_auctions (
  auction BIGINT,
  bids BIGINT,
  top_price BIGINT,
  mean_price BIGINT,
  window_end TIMESTAMP(3)
) WITH (
  'connector' = 'file-sink',
  'allow_write' = 'out',
  'config.path' = 'out/hot_auctions',
  'config.format' = 'jsonl'
);

SET 'checkpoint.interval' = '1s';

INSERT INTO hot_auctions
SELECT auction, count(*), max(price), avg(price), window_end
FROM TABLE(
  HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end
HAVING count(*) >= 20;
