-- Nexmark q8 (monitor new users) as SQL: people who opened an account and
-- put up an auction in the same 10 s tumbling window. The suite's query as
-- written, with `date_time` for `dateTime`: each side is a windowed GROUP BY
-- (without aggregates: each person, each seller once per window), joined on
-- the windows' ends — an interval join of width 0, whose rows leave the
-- state once the watermark passes their window. The same rows as q8.toml.
--
--   cargo run --release -- run examples/nexmark/q8.sql
CREATE TABLE person (
  id BIGINT,
  name VARCHAR,
  date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time
) WITH (
  'connector' = 'generator',
  'config.stream' = 'person',
  'config.events' = 2000000
);

CREATE TABLE auction (
  seller BIGINT,
  date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time
) WITH (
  'connector' = 'generator',
  'config.stream' = 'auction',
  'config.events' = 2000000
);

CREATE TABLE nexmark_q8 (
  id BIGINT,
  name VARCHAR,
  starttime TIMESTAMP(3)
) WITH (
  'connector' = 'file-sink',
  'allow_write' = 'out',
  'config.path' = 'out/q8',
  'config.format' = 'jsonl'
);

INSERT INTO nexmark_q8
SELECT P.id, P.name, P.starttime
FROM (
  SELECT id, name,
         window_start AS starttime,
         window_end AS endtime
  FROM TABLE(
         TUMBLE(TABLE person, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY id, name, window_start, window_end
) P
JOIN (
  SELECT seller,
         window_start AS starttime,
         window_end AS endtime
  FROM TABLE(
         TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY seller, window_start, window_end
) A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime;
