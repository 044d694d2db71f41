"""The Nexmark queries the oracle runs, as data.

Each entry of `SUITE` is one query of the public nexmark-flink suite
(`nexmark-flink/src/main/resources/queries/qN.sql` of the nexmark/nexmark
repository): `statements` is the suite's query text (its CREATE VIEW /
CREATE FUNCTION and its INSERT, as the suite writes them), `sink` the
columns of the suite's sink table. Both are written here as the suite
spells them (`dateTime`, `itemName`, …); `adapt()` makes the only changes
the two engines need: the column renames in `RENAMES`, applied to the
whole text, DDL included. The source tables' DDL, the sinks' WITH clauses
and the few per-engine adaptations (`flink_only`, `sink_ddl`, side tables)
are the oracle's own and listed in RESULTS.md.

`VARIANTS` are not in the suite: they are the window forms fvhost documents
(examples/nexmark/q5.sql, q7.sql, q18.sql, q19.sql, hot_auctions.sql), run
through both engines the same way, so that the oracle also checks hopping
windows, window top-N, window deduplication and HAVING against Flink.
"""

import re

# Camel-case column names of the suite -> the snake_case names fvhost's
# generator uses (DataFusion lower-cases unquoted identifiers, so the suite's
# spelling cannot be kept; both engines get the renamed text).
RENAMES = [
    ("dateTime", "date_time"),
    ("itemName", "item_name"),
    ("initialBid", "initial_bid"),
    ("emailAddress", "email_address"),
    ("creditCard", "credit_card"),
]

# The three input streams: column name, Flink/fvhost SQL type, file-source type.
TABLES = {
    "bid": [
        ("auction", "BIGINT", "int64"),
        ("bidder", "BIGINT", "int64"),
        ("price", "BIGINT", "int64"),
        ("channel", "VARCHAR", "utf8"),
        ("url", "VARCHAR", "utf8"),
        ("date_time", "TIMESTAMP(3)", "timestamp"),
        ("extra", "VARCHAR", "utf8"),
    ],
    "auction": [
        ("id", "BIGINT", "int64"),
        ("item_name", "VARCHAR", "utf8"),
        ("description", "VARCHAR", "utf8"),
        ("initial_bid", "BIGINT", "int64"),
        ("reserve", "BIGINT", "int64"),
        ("date_time", "TIMESTAMP(3)", "timestamp"),
        ("expires", "TIMESTAMP(3)", "timestamp"),
        ("seller", "BIGINT", "int64"),
        ("category", "BIGINT", "int64"),
        ("extra", "VARCHAR", "utf8"),
    ],
    "person": [
        ("id", "BIGINT", "int64"),
        ("name", "VARCHAR", "utf8"),
        ("email_address", "VARCHAR", "utf8"),
        ("credit_card", "VARCHAR", "utf8"),
        ("city", "VARCHAR", "utf8"),
        ("state", "VARCHAR", "utf8"),
        ("date_time", "TIMESTAMP(3)", "timestamp"),
        ("extra", "VARCHAR", "utf8"),
    ],
}

# nexmark-flink's DDL: WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
WATERMARK_DELAY_S = 4


def adapt(text: str) -> str:
    """The suite's text with the column renames applied (backquoted or not)."""
    for old, new in RENAMES:
        text = text.replace(f"`{old}`", new)
        text = re.sub(rf"\b{old}\b", new, text)
    return text


SUITE = [
    {
        "id": "q0",
        "title": "pass through",
        "tables": ["bid"],
        "sink": ("nexmark_q0", """
  auction  BIGINT,
  bidder  BIGINT,
  price  BIGINT,
  `dateTime`  TIMESTAMP(3),
  extra  VARCHAR"""),
        "statements": ["""
INSERT INTO nexmark_q0
SELECT auction, bidder, price, `dateTime`, extra FROM bid"""],
    },
    {
        "id": "q1",
        "title": "currency conversion",
        "tables": ["bid"],
        "sink": ("nexmark_q1", """
  auction  BIGINT,
  bidder  BIGINT,
  price  DECIMAL(23, 3),
  `dateTime`  TIMESTAMP(3),
  extra  VARCHAR"""),
        "statements": ["""
INSERT INTO nexmark_q1
SELECT
    auction,
    bidder,
    0.908 * price as price, -- convert dollar to euro
    `dateTime`,
    extra
FROM bid"""],
    },
    {
        "id": "q2",
        "title": "selection",
        "tables": ["bid"],
        "sink": ("nexmark_q2", """
  auction  BIGINT,
  price  BIGINT"""),
        "statements": ["""
INSERT INTO nexmark_q2
SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0"""],
    },
    {
        "id": "q3",
        "title": "local item suggestion (join)",
        "tables": ["auction", "person"],
        "sink": ("nexmark_q3", """
  name  VARCHAR,
  city  VARCHAR,
  state  VARCHAR,
  id  BIGINT"""),
        "statements": ["""
INSERT INTO nexmark_q3
SELECT
    P.name, P.city, P.state, A.id
FROM
    auction AS A INNER JOIN person AS P on A.seller = P.id
WHERE
    A.category = 10 and (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')"""],
    },
    {
        "id": "q4",
        "title": "average price for a category (join + updating aggregate)",
        "tables": ["auction", "bid"],
        "sink": ("nexmark_q4", """
  id BIGINT,
  final BIGINT"""),
        "statements": ["""
INSERT INTO nexmark_q4
SELECT
    Q.category,
    AVG(Q.final)
FROM (
    SELECT MAX(B.price) AS final, A.category
    FROM auction A, bid B
    WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
    GROUP BY A.id, A.category
) Q
GROUP BY Q.category"""],
    },
    {
        "id": "q5",
        "title": "hot items (join of hopping-window counts with their max)",
        "tables": ["bid"],
        "sink": ("nexmark_q5", """
  auction  BIGINT,
  num  BIGINT"""),
        "statements": ["""
INSERT INTO nexmark_q5
SELECT AuctionBids.auction, AuctionBids.num
 FROM (
   SELECT
     auction,
     count(*) AS num,
     window_start AS starttime,
     window_end AS endtime
     FROM TABLE(
             HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
     GROUP BY auction, window_start, window_end
 ) AS AuctionBids
 JOIN (
   SELECT
     max(CountBids.num) AS maxn,
     CountBids.starttime,
     CountBids.endtime
   FROM (
     SELECT
       count(*) AS num,
       window_start AS starttime,
       window_end AS endtime
     FROM TABLE(
                HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
     GROUP BY auction, window_start, window_end
     ) AS CountBids
   GROUP BY CountBids.starttime, CountBids.endtime
 ) AS MaxBids
 ON AuctionBids.starttime = MaxBids.starttime AND
    AuctionBids.endtime = MaxBids.endtime AND
    AuctionBids.num >= MaxBids.maxn"""],
    },
    {
        "id": "q6",
        "note": "the suite's text is not valid Flink SQL (`rownum` is filtered in the SELECT that defines it; the suite's own comment says q6 is not supported in Flink SQL).",
        "title": "average selling price by seller (join + OVER)",
        "tables": ["auction", "bid"],
        "sink": ("nexmark_q6", """
  seller VARCHAR,
  avg_price  BIGINT"""),
        "statements": ["""
INSERT INTO nexmark_q6
SELECT
    Q.seller,
    AVG(Q.price) OVER
        (PARTITION BY Q.seller ORDER BY Q.`dateTime` ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY B.price DESC) AS rownum
    FROM (SELECT A.id, A.seller, B.price, B.`dateTime`
        FROM auction AS A,
            bid AS B
        WHERE A.id = B.auction
            and B.`dateTime` between A.`dateTime` and A.expires)
    WHERE rownum <= 1
) AS Q"""],
    },
    {
        "id": "q7",
        "title": "highest bid (join with the window max)",
        "tables": ["bid"],
        "sink": ("nexmark_q7", """
  auction  BIGINT,
  bidder  BIGINT,
  price  BIGINT,
  `dateTime`  TIMESTAMP(3),
  extra  VARCHAR"""),
        "statements": ["""
INSERT INTO nexmark_q7
SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.extra
from bid B
JOIN (
  SELECT MAX(price) AS maxprice, window_end as `dateTime`
  FROM TABLE(
          TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.`dateTime` BETWEEN B1.`dateTime`  - INTERVAL '10' SECOND AND B1.`dateTime`"""],
    },
    {
        "id": "q8",
        "title": "monitor new users (window join)",
        "tables": ["person", "auction"],
        "sink": ("nexmark_q8", """
  id  BIGINT,
  name  VARCHAR,
  stime  TIMESTAMP(3)"""),
        "statements": ["""
INSERT INTO nexmark_q8
SELECT P.id, P.name, P.starttime
FROM (
  SELECT id, name,
        window_start AS starttime,
        window_end AS endtime
  FROM TABLE(
            TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY id, name, window_start, window_end
) P
JOIN (
  SELECT seller,
        window_start AS starttime,
        window_end AS endtime
  FROM TABLE(
        TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY seller, window_start, window_end
) A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime"""],
    },
    {
        "id": "q9",
        "title": "winning bids (join + top-1 per auction)",
        # Flink 2.3 plans the top-1 per auction with its rank number left
        # out as `Rank(strategy=[AppendFastStrategy])`, changelogMode [I]:
        # each new winner is an insert that the sink is to upsert by the
        # partition key (Flink's Top-N docs, "no ranking output
        # optimization"). Its rows are applied by that key.
        "upsert_key": ["id"],
        "tables": ["auction", "bid"],
        "sink": ("nexmark_q9", """
  id  BIGINT,
  itemName  VARCHAR,
  description  VARCHAR,
  initialBid  BIGINT,
  reserve  BIGINT,
  `dateTime`  TIMESTAMP(3),
  expires  TIMESTAMP(3),
  seller  BIGINT,
  category  BIGINT,
  extra  VARCHAR,
  auction  BIGINT,
  bidder  BIGINT,
  price  BIGINT,
  bid_dateTime  TIMESTAMP(3),
  bid_extra  VARCHAR"""),
        "statements": ["""
INSERT INTO nexmark_q9
SELECT
    id, itemName, description, initialBid, reserve, `dateTime`, expires, seller, category, extra,
    auction, bidder, price, bid_dateTime, bid_extra
FROM (
   SELECT A.*, B.auction, B.bidder, B.price, B.`dateTime` AS bid_dateTime, B.extra AS bid_extra,
     ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.`dateTime` ASC) AS rownum
   FROM auction A, bid B
   WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
)
WHERE rownum <= 1"""],
    },
    {
        "id": "q10",
        "note": "Flink's `DATE_FORMAT(ts, 'yyyy-MM-dd')` takes a Java `SimpleDateFormat` pattern; DataFusion's `date_format` is `to_char`, whose pattern is chrono's strftime (`'%Y-%m-%d'`), where `yyyy-MM-dd` has no conversion and is returned as it is.",
        "title": "log to file system (DATE_FORMAT)",
        "tables": ["bid"],
        # The suite's sink is a partitioned filesystem table (PARTITIONED BY
        # (dt, hm), partition commit options); here a plain sink with the
        # same columns.
        "sink": ("nexmark_q10", """
  auction  BIGINT,
  bidder  BIGINT,
  price  BIGINT,
  `dateTime`  TIMESTAMP(3),
  extra  VARCHAR,
  dt STRING,
  hm STRING"""),
        "statements": ["""
INSERT INTO nexmark_q10
SELECT auction, bidder, price, `dateTime`, extra, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd'), DATE_FORMAT(`dateTime`, 'HH:mm')
FROM bid"""],
    },
    {
        "id": "q11",
        "title": "user sessions (GROUP BY SESSION)",
        "tables": ["bid"],
        "sink": ("nexmark_q11", """
  bidder BIGINT,
  bid_count BIGINT,
  starttime TIMESTAMP(3),
  endtime TIMESTAMP(3)"""),
        "statements": ["""
INSERT INTO nexmark_q11
SELECT
    B.bidder,
    count(*) as bid_count,
    SESSION_START(B.`dateTime`, INTERVAL '10' SECOND) as starttime,
    SESSION_END(B.`dateTime`, INTERVAL '10' SECOND) as endtime
FROM bid B
GROUP BY B.bidder, SESSION(B.`dateTime`, INTERVAL '10' SECOND)"""],
    },
    {
        "id": "q12",
        "note": 'processing-time windows: Flink fires none when the bounded input ends, so it writes no row; the result depends on the wall clock in any case.',
        "title": "processing-time windows (PROCTIME)",
        "tables": ["bid"],
        "nondeterministic": "processing-time windows: the output depends on wall-clock time",
        "sink": ("discard_sink", """
  bidder BIGINT,
  bid_count BIGINT,
  starttime TIMESTAMP(3),
  endtime TIMESTAMP(3)"""),
        "statements": ["""
CREATE VIEW B AS SELECT *, PROCTIME() as p_time FROM bid""", """
INSERT INTO discard_sink
SELECT
    bidder,
    count(*) as bid_count,
    window_start AS starttime,
    window_end AS endtime
FROM TABLE(
        TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end"""],
    },
    {
        "id": "q13",
        "note": 'Flink 2 has no lookup (`FOR SYSTEM_TIME AS OF` a processing time) over a `filesystem` table; the suite ran it on the legacy filesystem connector, which is gone.',
        "title": "bounded side input join (lookup, FOR SYSTEM_TIME AS OF)",
        "tables": ["bid"],
        "side_input": True,
        "sink": ("nexmark_q13", """
  auction  BIGINT,
  bidder  BIGINT,
  price  BIGINT,
  `dateTime`  TIMESTAMP(3),
  `value`  VARCHAR"""),
        "statements": ["""
INSERT INTO nexmark_q13
SELECT
    B.auction,
    B.bidder,
    B.price,
    B.`dateTime`,
    S.`value`
FROM (SELECT *, PROCTIME() as p_time FROM bid) B
JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S
ON mod(B.auction, 10000) = S.key"""],
    },
    {
        "id": "q14",
        "note": 'fvhost has no SQL function declaration: the suite\'s `count_char` is not there.',
        "title": "calculation (CASE, HOUR, a UDF)",
        "tables": ["bid"],
        # The suite's `CREATE FUNCTION count_char AS
        # 'com.github.nexmark.flink.udf.CountChar'` names a Java class of the
        # nexmark jar; Flink gets the same function as a Python UDF instead
        # (see flink_udfs in run.py), fvhost has no SQL function declaration.
        "flink_udfs": ["count_char"],
        "sink": ("nexmark_q14", """
    auction BIGINT,
    bidder BIGINT,
    price  DECIMAL(23, 3),
    bidTimeType VARCHAR,
    `dateTime` TIMESTAMP(3),
    extra VARCHAR,
    c_counts BIGINT"""),
        "statements": ["""
INSERT INTO nexmark_q14
SELECT 
    auction,
    bidder,
    0.908 * price as price,
    CASE
        WHEN HOUR(`dateTime`) >= 8 AND HOUR(`dateTime`) <= 18 THEN 'dayTime'
        WHEN HOUR(`dateTime`) <= 6 OR HOUR(`dateTime`) >= 20 THEN 'nightTime'
        ELSE 'otherTime'
    END AS bidTimeType,
    `dateTime`,
    extra,
    count_char(extra, 'c') AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000"""],
    },
    {
        "id": "q15",
        "title": "bidding statistics report (non-windowed GROUP BY, DISTINCT + FILTER)",
        "tables": ["bid"],
        "sink": ("nexmark_q15", """
  `day` VARCHAR,
  total_bids BIGINT,
  rank1_bids BIGINT,
  rank2_bids BIGINT,
  rank3_bids BIGINT,
  total_bidders BIGINT,
  rank1_bidders BIGINT,
  rank2_bidders BIGINT,
  rank3_bidders BIGINT,
  total_auctions BIGINT,
  rank1_auctions BIGINT,
  rank2_auctions BIGINT,
  rank3_auctions BIGINT"""),
        "statements": ["""
INSERT INTO nexmark_q15
SELECT
     DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') as `day`,
     count(*) AS total_bids,
     count(*) filter (where price < 10000) AS rank1_bids,
     count(*) filter (where price >= 10000 and price < 1000000) AS rank2_bids,
     count(*) filter (where price >= 1000000) AS rank3_bids,
     count(distinct bidder) AS total_bidders,
     count(distinct bidder) filter (where price < 10000) AS rank1_bidders,
     count(distinct bidder) filter (where price >= 10000 and price < 1000000) AS rank2_bidders,
     count(distinct bidder) filter (where price >= 1000000) AS rank3_bidders,
     count(distinct auction) AS total_auctions,
     count(distinct auction) filter (where price < 10000) AS rank1_auctions,
     count(distinct auction) filter (where price >= 10000 and price < 1000000) AS rank2_auctions,
     count(distinct auction) filter (where price >= 1000000) AS rank3_auctions
FROM bid
GROUP BY DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')"""],
    },
    {
        "id": "q16",
        "title": "channel statistics report (non-windowed GROUP BY)",
        "tables": ["bid"],
        "sink": ("nexmark_q16", """
    channel VARCHAR,
    `day` VARCHAR,
    `minute` VARCHAR,
    total_bids BIGINT,
    rank1_bids BIGINT,
    rank2_bids BIGINT,
    rank3_bids BIGINT,
    total_bidders BIGINT,
    rank1_bidders BIGINT,
    rank2_bidders BIGINT,
    rank3_bidders BIGINT,
    total_auctions BIGINT,
    rank1_auctions BIGINT,
    rank2_auctions BIGINT,
    rank3_auctions BIGINT"""),
        "statements": ["""
INSERT INTO nexmark_q16
SELECT
    channel,
    DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') as `day`,
    max(DATE_FORMAT(`dateTime`, 'HH:mm')) as `minute`,
    count(*) AS total_bids,
    count(*) filter (where price < 10000) AS rank1_bids,
    count(*) filter (where price >= 10000 and price < 1000000) AS rank2_bids,
    count(*) filter (where price >= 1000000) AS rank3_bids,
    count(distinct bidder) AS total_bidders,
    count(distinct bidder) filter (where price < 10000) AS rank1_bidders,
    count(distinct bidder) filter (where price >= 10000 and price < 1000000) AS rank2_bidders,
    count(distinct bidder) filter (where price >= 1000000) AS rank3_bidders,
    count(distinct auction) AS total_auctions,
    count(distinct auction) filter (where price < 10000) AS rank1_auctions,
    count(distinct auction) filter (where price >= 10000 and price < 1000000) AS rank2_auctions,
    count(distinct auction) filter (where price >= 1000000) AS rank3_auctions
FROM bid
GROUP BY channel, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')"""],
    },
    {
        "id": "q17",
        "title": "auction statistics report (non-windowed GROUP BY)",
        "tables": ["bid"],
        "sink": ("nexmark_q17", """
  auction BIGINT,
  `day` VARCHAR,
  total_bids BIGINT,
  rank1_bids BIGINT,
  rank2_bids BIGINT,
  rank3_bids BIGINT,
  min_price BIGINT,
  max_price BIGINT,
  avg_price BIGINT,
  sum_price BIGINT"""),
        "statements": ["""
INSERT INTO nexmark_q17
SELECT
     auction,
     DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') as `day`,
     count(*) AS total_bids,
     count(*) filter (where price < 10000) AS rank1_bids,
     count(*) filter (where price >= 10000 and price < 1000000) AS rank2_bids,
     count(*) filter (where price >= 1000000) AS rank3_bids,
     min(price) AS min_price,
     max(price) AS max_price,
     avg(price) AS avg_price,
     sum(price) AS sum_price
FROM bid
GROUP BY auction, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')"""],
    },
    {
        "id": "q18",
        "title": "find last bid (deduplication over the whole stream)",
        "tables": ["bid"],
        "sink": ("nexmark_q18", """
    auction  BIGINT,
    bidder  BIGINT,
    price  BIGINT,
    channel  VARCHAR,
    url  VARCHAR,
    `dateTime`  TIMESTAMP(3),
    extra  VARCHAR"""),
        "statements": ["""
INSERT INTO nexmark_q18
SELECT auction, bidder, price, channel, url, `dateTime`, extra
 FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY `dateTime` DESC) AS rank_number
       FROM bid)
 WHERE rank_number <= 1"""],
    },
    {
        "id": "q19",
        "title": "auction top-10 price (top-N over the whole stream)",
        "tables": ["bid"],
        "sink": ("nexmark_q19", """
    auction  BIGINT,
    bidder  BIGINT,
    price  BIGINT,
    channel  VARCHAR,
    url  VARCHAR,
    `dateTime`  TIMESTAMP(3),
    extra  VARCHAR,
    rank_number  BIGINT"""),
        "statements": ["""
INSERT INTO nexmark_q19
SELECT * FROM
(SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid)
WHERE rank_number <= 10"""],
    },
    {
        "id": "q20",
        "title": "expand bid with auction (join)",
        "tables": ["bid", "auction"],
        # The suite declares `discard_sink` but inserts into nexmark_q20.
        "sink": ("nexmark_q20", """
    auction  BIGINT,
    bidder  BIGINT,
    price  BIGINT,
    channel  VARCHAR,
    url  VARCHAR,
    bid_dateTime  TIMESTAMP(3),
    bid_extra  VARCHAR,

    itemName  VARCHAR,
    description  VARCHAR,
    initialBid  BIGINT,
    reserve  BIGINT,
    auction_dateTime  TIMESTAMP(3),
    expires  TIMESTAMP(3),
    seller  BIGINT,
    category  BIGINT,
    auction_extra  VARCHAR"""),
        "statements": ["""
INSERT INTO nexmark_q20
SELECT
    auction, bidder, price, channel, url, B.`dateTime`, B.extra,
    itemName, description, initialBid, reserve, A.`dateTime`, expires, seller, category, A.extra
FROM
    bid AS B INNER JOIN auction AS A on B.auction = A.id
WHERE A.category = 10"""],
    },
    {
        "id": "q21",
        "title": "add channel id (CASE, REGEXP_EXTRACT)",
        "tables": ["bid"],
        "sink": ("nexmark_q21", """
    auction  BIGINT,
    bidder  BIGINT,
    price  BIGINT,
    channel  VARCHAR,
    channel_id  VARCHAR"""),
        "statements": ["""
INSERT INTO nexmark_q21
SELECT
    auction, bidder, price, channel,
    CASE
        WHEN lower(channel) = 'apple' THEN '0'
        WHEN lower(channel) = 'google' THEN '1'
        WHEN lower(channel) = 'facebook' THEN '2'
        WHEN lower(channel) = 'baidu' THEN '3'
        ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)
        END
    AS channel_id FROM bid
    where REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) is not null or
          lower(channel) in ('apple', 'google', 'facebook', 'baidu')"""],
    },
    {
        "id": "q22",
        "title": "get URL directories (SPLIT_INDEX)",
        "tables": ["bid"],
        "sink": ("discard_sink", """
      auction  BIGINT,
      bidder  BIGINT,
      price  BIGINT,
      channel  VARCHAR,
      dir1  VARCHAR,
      dir2  VARCHAR,
      dir3  VARCHAR"""),
        "statements": ["""
INSERT INTO discard_sink
SELECT
    auction, bidder, price, channel,
    SPLIT_INDEX(url, '/', 3) as dir1,
    SPLIT_INDEX(url, '/', 4) as dir2,
    SPLIT_INDEX(url, '/', 5) as dir3 FROM bid"""],
    },
]

VARIANTS = [
    {
        "id": "q5-topn",
        "title": "q5 as a window top-N (examples/nexmark/q5.sql)",
        "tables": ["bid"],
        "sink": ("nexmark_q5", """
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  auction BIGINT,
  bids BIGINT,
  rownum BIGINT"""),
        "statements": ["""
CREATE VIEW auction_bids AS
SELECT window_start, window_end, auction, count(*) AS bids
FROM TABLE(
  HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
GROUP BY window_start, window_end, auction""", """
INSERT INTO nexmark_q5
SELECT window_start, window_end, auction, bids, rownum FROM (
  SELECT *, ROW_NUMBER() OVER (
    PARTITION BY window_start, window_end
    ORDER BY bids DESC, auction) AS rownum
  FROM auction_bids
)
WHERE rownum <= 1"""],
    },
    {
        "id": "q7-topn",
        "title": "q7 as a window top-N (examples/nexmark/q7.sql)",
        "tables": ["bid"],
        "sink": ("nexmark_q7", """
  auction BIGINT,
  bidder BIGINT,
  price BIGINT,
  date_time TIMESTAMP(3),
  window_end TIMESTAMP(3)"""),
        "statements": ["""
INSERT INTO nexmark_q7
SELECT auction, bidder, price, date_time, window_end
FROM (
  SELECT *, ROW_NUMBER() OVER (
    PARTITION BY window_start, window_end
    ORDER BY price DESC, auction, bidder) AS rownum
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
)
WHERE rownum <= 1"""],
    },
    {
        "id": "q18-window",
        "title": "q18 per 10 s window: window deduplication (examples/nexmark/q18.sql)",
        "tables": ["bid"],
        "sink": ("nexmark_q18", """
  auction BIGINT,
  bidder BIGINT,
  price BIGINT,
  channel VARCHAR,
  url VARCHAR,
  date_time TIMESTAMP(3),
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3)"""),
        "statements": ["""
INSERT INTO nexmark_q18
SELECT auction, bidder, price, channel, url, date_time, window_start, window_end
FROM (
  SELECT *, ROW_NUMBER() OVER (
    PARTITION BY window_start, window_end, bidder, auction
    ORDER BY date_time DESC) AS rank_number
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
)
WHERE rank_number <= 1"""],
    },
    {
        "id": "q19-window",
        "title": "q19 per 10 s window: window top-10 (examples/nexmark/q19.sql)",
        "tables": ["bid"],
        "sink": ("nexmark_q19", """
  auction BIGINT,
  bidder BIGINT,
  price BIGINT,
  channel VARCHAR,
  url VARCHAR,
  date_time TIMESTAMP(3),
  extra VARCHAR,
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  rank_number BIGINT"""),
        "statements": ["""
INSERT INTO nexmark_q19
SELECT auction, bidder, price, channel, url, date_time, extra, window_start, window_end, rank_number
FROM (
  SELECT *, ROW_NUMBER() OVER (
    PARTITION BY window_start, window_end, auction
    ORDER BY price DESC) AS rank_number
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
)
WHERE rank_number <= 10"""],
    },
    {
        "id": "hot_auctions",
        "title": "hopping-window counts with HAVING and avg (examples/nexmark/hot_auctions.sql)",
        "tables": ["bid"],
        "sink": ("hot_auctions", """
  auction BIGINT,
  bids BIGINT,
  top_price BIGINT,
  mean_price DOUBLE,
  window_end TIMESTAMP(3)"""),
        "statements": ["""
INSERT INTO hot_auctions
SELECT auction, count(*), max(price), avg(price), window_end
FROM TABLE(
  HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end
HAVING count(*) >= 20"""],
    },
]
