-- Nexmark q19 (the ten highest bids of each auction) as SQL, per 10 s
-- tumbling window: nexmark-flink ranks over the whole unbounded stream (an
-- updating result); this is Flink's window top-N form, planned onto one
-- native top-N stage keyed by auction. The same rows as q19.toml.
--
--   cargo run --release -- run examples/nexmark/q19.sql
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

CREATE TABLE nexmark_q19 WITH (
  'connector' = 'file-sink',
  'allow_write' = 'out',
  'config.path' = 'out/q19',
  'config.format' = 'jsonl'
);

INSERT INTO nexmark_q19
SELECT * FROM (
  SELECT *, ROW_NUMBER() OVER (
    PARTITION BY window_start, window_end, auction
    ORDER BY price DESC) AS rank_number
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
)
WHERE rank_number <= 10;
