"""The Nexmark queries q0–q23: Flink's published SQL, and what laminardb runs of each today.

Entry points: :data:`QUERIES` (name → :class:`NexmarkQuery`), :data:`SOURCES_DDL` (the three
sources with Nexmark's schemas and its 4-second watermark) and :func:`query`.

The published texts are the ``INSERT INTO nexmark_qN SELECT …`` statements of the reference
implementation, ``nexmark/nexmark: nexmark-flink/src/main/resources/queries/qN.sql`` (commit
6b3646c); the sources are its ``ddl_gen.sql`` + ``ddl_views.sql``. Each query says how
laminardb stands with it:

* ``"runs"``: the published SELECT runs as written (``CREATE STREAM qN AS <published SELECT>``);
* ``"partial"``: a stated part of it runs;
* ``"variant"``: a stated rewrite runs (``needs`` says what it changes); the published form is
  refused until the named features exist;
* ``"not yet"``: nothing runs; ``needs`` names the missing features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["FELDERA_EPS_PER_CORE", "FLINK_V2_EPS_PER_CORE", "NexmarkQuery", "QUERIES", "SOURCES_DDL", "query"]

Status = Literal["runs", "partial", "variant", "not yet"]

# ddl_gen.sql: WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND, on every stream.
SOURCES_DDL = """
CREATE SOURCE person (id BIGINT, name VARCHAR, emailAddress VARCHAR, creditCard VARCHAR,
    city VARCHAR, state VARCHAR, `dateTime` TIMESTAMP(3) NOT NULL, extra VARCHAR,
    WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND);
CREATE SOURCE auction (id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT,
    reserve BIGINT, `dateTime` TIMESTAMP(3) NOT NULL, expires TIMESTAMP(3), seller BIGINT,
    category BIGINT, extra VARCHAR,
    WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND);
CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    `dateTime` TIMESTAMP(3) NOT NULL, extra VARCHAR,
    WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND);
"""

# Flink's Nexmark V2 throughput per core (events/s), from nexmark/nexmark's GUIDE_V2 table
# (Flink 1.x, 10M events/s sources, 100M events); queries without a figure there are absent.
FLINK_V2_EPS_PER_CORE: dict[str, float] = {
    "q0": 379e3, "q3": 219e3, "q4": 28e3, "q5": 75e3, "q7": 23e3, "q8": 162e3, "q9": 14e3,
    "q11": 46e3, "q15": 168e3, "q17": 160e3, "q18": 65e3, "q19": 43e3, "q20": 18e3, "q21": 147e3,
    "q22": 212e3,
}

# Feldera's streaming Nexmark throughput on 16 cores (events/s), from feldera/feldera
# benchmark/README.md "16-core Nexmark Streaming Performance" (commit 1eb7bb0a), divided by 16
# for a per-core figure; queries without a Feldera figure there are absent.
FELDERA_EPS_PER_CORE: dict[str, float] = {
    name: eps / 16 for name, eps in {
        "q0": 6_973_987, "q1": 6_595_871, "q2": 6_748_549, "q3": 6_608_075, "q4": 4_233_521,
        "q5": 6_589_786, "q6": 3_997_921, "q7": 3_136_763, "q8": 6_641_870, "q9": 910_680,
        "q12": 6_682_259, "q13": 3_675_255, "q14": 6_858_711, "q15": 3_539_322, "q16": 810_701,
        "q17": 3_870_269, "q18": 1_358_216, "q19": 1_201_216, "q20": 1_352_192, "q21": 6_634_820,
        "q22": 6_305_568,
    }.items()
}


@dataclass(frozen=True)
class NexmarkQuery:
    """One Nexmark query: the published SELECT, laminardb's statement for it and its status."""

    name: str
    description: str
    flink: str  # the published SELECT (of INSERT INTO nexmark_qN …)
    status: Status
    needs: str = ""  # the missing features, for everything short of "runs"
    laminardb: str | None = None  # CREATE STREAM <name> AS …, when something runs
    sources: tuple[str, ...] = ("bid",)
    sink: str = ""  # the published CREATE TABLE of the sink, when it is not a blackhole (q10)
    views: str = ""  # the views the published file creates before its INSERT (q12's B), as DDL

    @property
    def runnable(self) -> bool:
        return self.laminardb is not None

    def statement(self) -> str:
        """What laminardb executes: its own statement, or the published SELECT as a stream
        (which the engine refuses with a typed error naming what it lacks)."""
        return self.laminardb or f"{self.views}CREATE STREAM {self.name} AS {self.flink}"

    def published(self) -> str:
        """The published form: ``INSERT INTO`` the published sink when it is not a blackhole (q10's
        partitioned filesystem table), else the published SELECT as a stream."""
        if self.sink:
            return f"{self.sink};\nINSERT INTO nexmark_{self.name}\n{self.flink}"
        return f"{self.views}CREATE STREAM {self.name} AS {self.flink}"


def _stream(name: str, select: str) -> str:
    return f"CREATE STREAM {name} AS {select}"


_Q5_INNER = """SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end"""

# q6, corrected (see its entry in _LAMINARDB): the published SELECT with the row-number filter moved
# out of the SELECT that defines the row number, and the join's subquery named.
_Q6 = """CREATE STREAM q6 AS SELECT Q.seller,
    AVG(Q.price) OVER (PARTITION BY Q.seller ORDER BY Q.`dateTime` ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
FROM (
    SELECT * FROM (
        SELECT *, ROW_NUMBER() OVER (PARTITION BY AB.id, AB.seller ORDER BY AB.price DESC) AS rownum
        FROM (SELECT A.id, A.seller, B.price, B.`dateTime`
              FROM auction AS A, bid AS B
              WHERE A.id = B.auction and B.`dateTime` between A.`dateTime` and A.expires) AS AB
    )
    WHERE rownum <= 1
) AS Q"""

# q10.sql's sink (its path without the ${NEXMARK_DIR}/${SUBMIT_TIME} variables).
_Q10_SINK = """CREATE TABLE nexmark_q10 (
  auction  BIGINT, bidder  BIGINT, price  BIGINT, `dateTime`  TIMESTAMP(3), extra  VARCHAR,
  dt STRING, hm STRING
) PARTITIONED BY (dt, hm) WITH (
  'connector' = 'filesystem',
  'path' = 'file:///tmp/nexmark/data/output/bid/',
  'format' = 'csv',
  'sink.partition-commit.trigger' = 'partition-time',
  'sink.partition-commit.delay' = '1 min',
  'sink.partition-commit.policy.kind' = 'success-file',
  'partition.time-extractor.timestamp-pattern' = '$dt $hm:00',
  'sink.rolling-policy.rollover-interval' = '1min',
  'sink.rolling-policy.check-interval' = '1min'
)"""

# q12.sql creates view B (the bids with their processing time) before its INSERT. Flink's CREATE
# VIEW is a named query: laminardb's is CREATE TEMPORARY VIEW (a stream; CREATE VIEW alone is
# a materialized view here, outside a Flink script).
_VIEWS: dict[str, str] = {"q12": "CREATE TEMPORARY VIEW B AS SELECT *, PROCTIME() as p_time FROM bid;\n"}
# q13.sql's side input, in Flink's current filesystem connector (the published file uses the legacy
# 'connector.type' keys): a CSV file with a header row, its path in the variable NEXMARK_SIDE_INPUT
_VIEWS["q13"] = ("CREATE TABLE side_input (key BIGINT, `value` VARCHAR) WITH ('connector' = 'filesystem', "
                 "'path' = '${NEXMARK_SIDE_INPUT}', 'format' = 'csv');\n")

_PUBLISHED: dict[str, tuple[str, str]] = {
    "q0": ("pass-through", "SELECT auction, bidder, price, `dateTime`, extra FROM bid"),
    "q1": ("currency conversion",
           "SELECT auction, bidder, 0.908 * price as price, `dateTime`, extra FROM bid"),
    "q2": ("selection", "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0"),
    "q3": ("local item suggestion", """SELECT P.name, P.city, P.state, A.id
FROM auction AS A INNER JOIN person AS P on A.seller = P.id
WHERE A.category = 10 and (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')"""),
    "q4": ("average price for a category", """SELECT Q.category, AVG(Q.final)
FROM (
    SELECT MAX(B.price) AS final, A.category
    FROM auction A, bid B
    WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
    GROUP BY A.id, A.category
) Q
GROUP BY Q.category"""),
    "q5": ("hot items", f"""SELECT AuctionBids.auction, AuctionBids.num
FROM ({_Q5_INNER}) AS AuctionBids
JOIN (
  SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
  FROM (
    SELECT count(*) AS num, window_start AS starttime, window_end AS endtime
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end
  ) AS CountBids
  GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
   AND AuctionBids.num >= MaxBids.maxn"""),
    "q6": ("average selling price by seller", """SELECT Q.seller,
    AVG(Q.price) OVER (PARTITION BY Q.seller ORDER BY Q.`dateTime` ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY B.price DESC) AS rownum
    FROM (SELECT A.id, A.seller, B.price, B.`dateTime`
          FROM auction AS A, bid AS B
          WHERE A.id = B.auction and B.`dateTime` between A.`dateTime` and A.expires)
    WHERE rownum <= 1
) AS Q"""),
    "q7": ("highest bid", """SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.extra
from bid B
JOIN (
  SELECT MAX(price) AS maxprice, window_end as `dateTime`
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.`dateTime` BETWEEN B1.`dateTime` - INTERVAL '10' SECOND AND B1.`dateTime`"""),
    "q8": ("monitor new users", """SELECT P.id, P.name, P.starttime
FROM (
  SELECT id, name, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY id, name, window_start, window_end
) P
JOIN (
  SELECT seller, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY seller, window_start, window_end
) A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime"""),
    "q9": ("winning bids", """SELECT id, itemName, description, initialBid, reserve, `dateTime`, expires,
    seller, category, extra, auction, bidder, price, bid_dateTime, bid_extra
FROM (
   SELECT A.*, B.auction, B.bidder, B.price, B.`dateTime` AS bid_dateTime, B.extra AS bid_extra,
     ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.`dateTime` ASC) AS rownum
   FROM auction A, bid B
   WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
)
WHERE rownum <= 1"""),
    "q10": ("log to file system", """SELECT auction, bidder, price, `dateTime`, extra,
    DATE_FORMAT(`dateTime`, 'yyyy-MM-dd'), DATE_FORMAT(`dateTime`, 'HH:mm')
FROM bid"""),
    "q11": ("user sessions", """SELECT
    B.bidder,
    count(*) as bid_count,
    SESSION_START(B.`dateTime`, INTERVAL '10' SECOND) as starttime,
    SESSION_END(B.`dateTime`, INTERVAL '10' SECOND) as endtime
FROM bid B
GROUP BY B.bidder, SESSION(B.`dateTime`, INTERVAL '10' SECOND)"""),
    "q12": ("processing-time windows", """SELECT bidder, count(*) as bid_count,
    window_start AS starttime, window_end AS endtime
FROM TABLE(TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end"""),
    "q13": ("bounded side input join", """SELECT B.auction, B.bidder, B.price, B.`dateTime`, S.`value`
FROM (SELECT *, PROCTIME() as p_time FROM bid) B
JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S
ON mod(B.auction, 10000) = S.key"""),
    "q14": ("calculation", """SELECT auction, bidder, 0.908 * price as price,
    CASE
        WHEN HOUR(`dateTime`) >= 8 AND HOUR(`dateTime`) <= 18 THEN 'dayTime'
        WHEN HOUR(`dateTime`) <= 6 OR HOUR(`dateTime`) >= 20 THEN 'nightTime'
        ELSE 'otherTime'
    END AS bidTimeType,
    `dateTime`, extra, count_char(extra, 'c') AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000"""),
    "q15": ("bidding statistics report", """SELECT
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
GROUP BY DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')"""),
    "q16": ("channel statistics report", """SELECT
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
GROUP BY channel, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')"""),
    "q17": ("auction statistics report", """SELECT
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
GROUP BY auction, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')"""),
    "q18": ("find last bid", """SELECT auction, bidder, price, channel, url, `dateTime`, extra
 FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY `dateTime` DESC) AS rank_number
       FROM bid)
 WHERE rank_number <= 1"""),
    "q19": ("auction Top-N", """SELECT * FROM
(SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid)
WHERE rank_number <= 10"""),
    "q20": ("expand bid with auction", """SELECT
    auction, bidder, price, channel, url, B.`dateTime`, B.extra,
    itemName, description, initialBid, reserve, A.`dateTime`, expires, seller, category, A.extra
FROM bid AS B INNER JOIN auction AS A on B.auction = A.id
WHERE A.category = 10"""),
    "q21": ("add channel id", """SELECT
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
          lower(channel) in ('apple', 'google', 'facebook', 'baidu')"""),
    "q22": ("get URL directories", """SELECT
    auction, bidder, price, channel,
    SPLIT_INDEX(url, '/', 3) as dir1,
    SPLIT_INDEX(url, '/', 4) as dir2,
    SPLIT_INDEX(url, '/', 5) as dir3 FROM bid"""),
    "q23": ("multi-way join", """SELECT bidder, price, channel, url, B.extra AS bid_extra,
       P.id AS person_id, name, emailAddress, creditCard, city, state, P.extra AS person_extra,
       itemName, description, initialBid, reserve, A.dateTime AS auction_dateTime, expires,
       seller, category, A.extra AS auction_extra
FROM bid B
JOIN person P ON P.id = B.bidder
JOIN auction A ON A.seller = B.bidder"""),
}

# name → (status, needs, laminardb's statement or None, sources read)
_LAMINARDB: dict[str, tuple[Status, str, str | None, tuple[str, ...]]] = {
    "q0": ("runs", "", None, ("bid",)),
    "q1": ("runs", "DECIMAL(23, 3) (0.908 * price is DOUBLE in laminardb)", None, ("bid",)),
    "q2": ("runs", "", None, ("bid",)),
    "q3": ("runs", "", None, ("auction", "person")),
    "q4": ("runs", "", None, ("auction", "bid")),
    "q5": ("runs", "", None, ("bid",)),
    "q6": ("variant", "the published text filters the row number in the SELECT that defines it (WHERE rownum <= 1 "
                      "beside ROW_NUMBER() … AS rownum) and reads A.id, A.seller, B.price through an unaliased "
                      "subquery, which no engine accepts (Flink refuses it too). laminardb runs its corrected form: "
                      "the subquery is named AB, the row number's PARTITION BY / ORDER BY read AB's columns, and "
                      "WHERE rownum <= 1 moves to a SELECT * around it (the Top-1 bid per auction, a changelog); "
                      "the OVER aggregate is unchanged. AVG over ROWS BETWEEN 10 PRECEDING runs over that "
                      "changelog: a new winning bid retracts the old one and re-emits the averages of the 10 rows "
                      "after it; rows of equal dateTime are ordered by id", _Q6, ("auction", "bid")),
    "q7": ("runs", "", None, ("bid",)),
    "q8": ("runs", "", None, ("person", "auction")),
    "q9": ("runs", "", None, ("auction", "bid")),
    "q10": ("runs", "its sink writes Hive directories dt=…/hm=…; files roll and become visible per checkpoint "
                    "(exactly-once when durable): Flink's rolling and partition-commit options (the success "
                    "file) are accepted, not applied", None, ("bid",)),
    "q11": ("runs", "", None, ("bid",)),
    "q12": ("runs", "processing time: the windows follow the connection's clock (config['clock'], "
                    "the wall clock by default), so results vary from run to run", None, ("bid",)),
    "q13": ("runs", "a processing-time lookup join: each bid joins side_input as read when it arrives; "
                    "side_input is a CSV file (key,value with a header row) named by the variable "
                    "NEXMARK_SIDE_INPUT: open(config={'vars': {'NEXMARK_SIDE_INPUT': path}}), then start() "
                    "and flush() before inserting bids", None, ("bid",)),
    "q14": ("runs", "its UDF count_char registered on the connection (laminardb.nexmark.UDFS: "
                    "laminardb.open(config={'udfs': UDFS})); 0.908 * price is DOUBLE (DECIMAL(23, 3) in Flink)",
            None, ("bid",)),
    "q15": ("runs", "", None, ("bid",)),
    "q16": ("runs", "", None, ("bid",)),
    "q17": ("runs", "", None, ("bid",)),
    "q18": ("runs", "", None, ("bid",)),
    "q19": ("runs", "", None, ("bid",)),
    "q20": ("runs", "", None, ("bid", "auction")),
    "q21": ("runs", "", None, ("bid",)),
    "q22": ("runs", "", None, ("bid",)),
    "q23": ("runs", "", None, ("bid", "person", "auction")),
}


def _build() -> dict[str, NexmarkQuery]:
    out = {}
    for name, (desc, flink) in _PUBLISHED.items():
        status, needs, stmt, sources = _LAMINARDB[name]
        sink = _Q10_SINK if name == "q10" else ""
        views = _VIEWS.get(name, "")
        if status == "runs":
            stmt = views + _stream(name, flink)
        out[name] = NexmarkQuery(name, desc, flink, status, needs, stmt, sources, sink, views)
    return out


QUERIES: dict[str, NexmarkQuery] = _build()


def query(name: str) -> NexmarkQuery:
    """The query ``name`` (``"q5"``, ``"Q5"`` or ``"5"``); a ``KeyError`` lists the names."""
    key = name.lower() if name.lower().startswith("q") else f"q{name}"
    if key not in QUERIES:
        msg = f"no Nexmark query {name!r}; the queries are {', '.join(QUERIES)}"
        raise KeyError(msg)
    return QUERIES[key]
