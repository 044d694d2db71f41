-- Nexmark q13 (bounded side input join) as SQL: every bid with the value
-- of the side input row whose key is the bid's auction modulo 1000. The
-- suite's lookup join (`FOR SYSTEM_TIME AS OF` a PROCTIME() column, the
-- key an expression of the bid); the side input is a table read
-- completely before the bids start, so the time is not read. The select
-- list names the columns `q13.toml` writes.
--
--   cargo run --release -- run examples/nexmark/q13.sql
CREATE TABLE bid (
  auction BIGINT,
  bidder BIGINT,
  price BIGINT,
  date_time TIMESTAMP(3)
) WITH (
  'connector' = 'generator',
  'config.stream' = 'bid',
  'config.events' = 2000000
);

CREATE TABLE side_input (
  `key` BIGINT,
  `value` VARCHAR
) WITH (
  'connector' = 'file-source',
  'allow_read' = 'data',
  'config.path' = 'data/side_input.csv',
  'config.columns' = ARRAY['key:int64', 'value:utf8']
);

CREATE TABLE nexmark_q13 WITH (
  'connector' = 'file-sink',
  'allow_write' = 'out',
  'config.path' = 'out/q13_sql',
  'config.format' = 'jsonl'
);

INSERT INTO nexmark_q13
SELECT B.auction, B.bidder, B.price, B.date_time, mod(B.auction, 1000) AS side_key,
    S.`key`, S.`value`
FROM (SELECT *, PROCTIME() as p_time FROM bid) B
JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S
ON mod(B.auction, 1000) = S.`key`;
