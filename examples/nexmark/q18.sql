-- Nexmark q18 (last bid of each bidder on each auction) as SQL, per 10 s
-- tumbling window: nexmark-flink ranks over the whole unbounded stream
-- (an updating result); this is Flink's window deduplication form — a
-- ROW_NUMBER() by time, descending, kept at 1 — planned onto one native
-- top-N stage. The same rows as q18.toml.
--
--   cargo run --release -- run examples/nexmark/q18.sql
CREATE TABLE bid (
  auction BIGINT,
  bidder BIGINT,
  price BIGINT,
  channel VARCHAR,
  url VARCHAR,
  date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time
) WITH (
  'connector' = 'generator',
  'config.stream' = 'bid',
  'config.events' = 2000000
);

CREATE TABLE nexmark_q18 WITH (
  'connector' = 'file-sink',
  'allow_write' = 'out',
  'config.path' = 'out/q18',
  'config.format' = 'jsonl'
);

INSERT INTO nexmark_q18
SELECT auction, bidder, price, channel, url, date_time, window_start, window_end
FROM (
  SELECT *, ROW_NUMBER() OVER (
    PARTITION BY window_start, window_end, bidder, auction
    ORDER BY date_time DESC) AS rank_number
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
)
WHERE rank_number <= 1;
