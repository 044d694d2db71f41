-- Nexmark q3 (local item suggestion) as SQL: sellers in Oregon, Idaho or
-- California who put up an auction in category 10, with the auction. The
-- suite's join bounded in event time, as q3.toml does it: an auction meets
-- its seller's account if it opens within 60 s of event time after it, so
-- both leave the join's state as the watermark passes (the suite's
-- unbounded form is `tests/flink-oracle`'s q3). The same rows as q3.toml.
--
--   cargo run --release -- run examples/nexmark/q3.sql
CREATE TABLE person (
  id BIGINT,
  name VARCHAR,
  city VARCHAR,
  state VARCHAR,
  date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time
) WITH (
  'connector' = 'generator',
  'config.stream' = 'person',
  'config.events' = 2000000
);

CREATE TABLE auction (
  id BIGINT,
  seller BIGINT,
  category BIGINT,
  date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time
) WITH (
  'connector' = 'generator',
  'config.stream' = 'auction',
  'config.events' = 2000000
);

CREATE TABLE nexmark_q3 (
  name VARCHAR,
  city VARCHAR,
  state VARCHAR,
  id BIGINT
) WITH (
  'connector' = 'file-sink',
  'allow_write' = 'out',
  'config.path' = 'out/q3',
  'config.format' = 'jsonl'
);

INSERT INTO nexmark_q3
SELECT P.name, P.city, P.state, A.id
FROM person AS P
JOIN auction AS A
  ON P.id = A.seller
  AND A.date_time BETWEEN P.date_time AND P.date_time + INTERVAL '60' SECOND
WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA');
