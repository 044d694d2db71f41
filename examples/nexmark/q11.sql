-- Nexmark q11 (user sessions) as SQL: how many bids each bidder makes in
-- a session of activity (bids less than 10 s apart). The suite's query as
-- written in Flink's group-window syntax, with `date_time` for `dateTime`;
-- GROUP BY SESSION(…) is one native session stage keyed by bidder. The
-- same rows as q11.toml (there as window_start/window_end).
--
--   cargo run --release -- run examples/nexmark/q11.sql
CREATE TABLE bid (
  auction BIGINT,
  bidder BIGINT,
  date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time
) WITH (
  'connector' = 'generator',
  'config.stream' = 'bid',
  'config.events' = 2000000
);

CREATE TABLE nexmark_q11 (
  bidder BIGINT,
  bid_count BIGINT,
  starttime TIMESTAMP(3),
  endtime TIMESTAMP(3)
) WITH (
  'connector' = 'file-sink',
  'allow_write' = 'out',
  'config.path' = 'out/q11',
  'config.format' = 'jsonl'
);

INSERT INTO nexmark_q11
SELECT
    B.bidder,
    count(*) as bid_count,
    SESSION_START(B.date_time, INTERVAL '10' SECOND) as starttime,
    SESSION_END(B.date_time, INTERVAL '10' SECOND) as endtime
FROM bid B
GROUP BY B.bidder, SESSION(B.date_time, INTERVAL '10' SECOND);
