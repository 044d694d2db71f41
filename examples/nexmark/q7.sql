-- Nexmark q7 (highest bid) as SQL: the highest bid of every 10 s tumbling
-- window with its auction, bidder and time. nexmark-flink writes it as a
-- join with the window's maximum; this is Flink's window top-N form of the
-- same query (ties go to the lowest auction, then bidder), planned onto
-- one native top-N stage. The same rows as q7.toml.
--
--   cargo run --release -- run examples/nexmark/q7.sql
CREATE TABLE bid (
  auction BIGINT,
  bidder BIGINT,
  price BIGINT,
  date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time
) WITH (
  'connector' = 'generator',
  'config.stream' = 'bid',
  'config.events' = 2000000
);

CREATE TABLE nexmark_q7 WITH (
  'connector' = 'file-sink',
  'allow_write' = 'out',
  'config.path' = 'out/q7',
  'config.format' = 'jsonl'
);

INSERT INTO nexmark_q7
SELECT auction, bidder, price, date_time, window_end
FROM (
  SELECT *, ROW_NUMBER() OVER (
    PARTITION BY window_start, window_end
    ORDER BY price DESC, auction, bidder) AS rownum
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
)
WHERE rownum <= 1;
