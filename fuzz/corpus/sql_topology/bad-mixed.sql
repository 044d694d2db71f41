CREATE TABLE t (ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' YEAR) WITH ('connector' = 'x', 'allow_write' = ARRAY['../..']);
INSERT INTO t SELECT * FROM (SELECT *, ROW_NUMBER() OVER () AS r FROM t) WHERE r <= 0;
SET 'a.b' = ARRAY[1, -2.5, TRUE];
