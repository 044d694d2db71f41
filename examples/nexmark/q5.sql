-- Nexmark q5 (hot items) as SQL: the auction with the most bids in each
-- hopping window of 10 s every 2 s. nexmark-flink writes it as a join of
-- the counts with their maximum; this is Flink's window top-N form of the
-- same query (ties go to the lowest auction): the view is one native window
-- stage, the ranking one top-N stage per window_end. The same rows as
-- q5.toml.
--
-- Kill it and run it again: it resumes from its last epoch and writes
-- every window exactly once.
--
--   cargo run --release -- run examples/nexmark/q5.sql
CREATE TABLE bid (
  auction BIGINT,
  date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time
) WITH (
  'connector' = 'generator',
  'config.stream' = 'bid',
  'config.events' = 2000000
);

CREATE TABLE nexmark_q5 WITH (
  'connector' = 'file-sink',
  'allow_write' = 'out',
  'config.path' = 'out/q5',
  'config.format' = 'jsonl'
);

SET 'checkpoint.interval' = '1s';

CREATE VIEW auction_bids AS
SELECT window_start, window_end, auction, count(*) AS bids
FROM TABLE(
  HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
GROUP BY window_start, window_end, auction;

INSERT INTO nexmark_q5
SELECT * FROM (
  SELECT *, ROW_NUMBER() OVER (
    PARTITION BY window_start, window_end
    ORDER BY bids DESC, auction) AS rank
  FROM auction_bids
)
WHERE rank <= 1;
