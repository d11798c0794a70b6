"""``WITH (…)`` options of CREATE SOURCE / STREAM / SINK: read them, check every key, and map
Flink's and LaminarDB's connector options onto laminardb's own.

Entry points: ``read_options(text)`` (a parenthesized option list → dict), ``source_options``,
``stream_options``, ``sink_with_options``, ``known_sink_options(connector)``,
``check_sink_options`` and ``check_new_statement`` (the keys of FILE sinks and Flink filesystem
tables, checked when a statement is written — not when a durable catalog is replayed, so a
database whose catalog took a key before it was checked still opens).

Keys may be bare (``watermark = 'ts'``) or quoted as in Flink (``'connector' = 'kafka'``);
values are quoted strings, bare words/numbers, or an INTERVAL. A key an object does not take
raises ``UnknownOptionError`` (LDB-1002) naming the keys it does take — nothing is ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from laminardb.sql._lexer import split_top_level
from laminardb.sql.changelog_kinds import is_changelog_kind, native_kind
from laminardb.sql.exceptions import (
    SqlParseError,
    SqlTypeError,
    UnknownOptionError,
    UnsupportedSqlError,
)

__all__ = [
    "SOURCE_OPTIONS",
    "STREAM_OPTIONS",
    "SourceOptions",
    "check_file_table_keys",
    "check_new_statement",
    "check_sink_options",
    "known_sink_options",
    "lateness_ms",
    "read_options",
    "sink_with_options",
    "source_options",
    "stream_options",
]

_ITEM = re.compile(
    r"""(?is)\s*(?P<q>['"`]?)(?P<key>[A-Za-z_][\w.\-]*)(?P=q)\s*=\s*"""
    r"""(?:'(?P<str>(?:[^']|'')*)'|(?P<iv>INTERVAL\s+'[^']*'(?:\s+[A-Za-z]+)?)|(?P<bare>[^\s,']+))\s*$"""
)

#: CREATE SOURCE … WITH (…): key → what it means (docs/sql.md lists the same)
SOURCE_OPTIONS = {
    "watermark": "the event-time column (TIMESTAMP or BIGINT epoch ms) to keep a watermark on",
    "allowed_lateness": "the watermark delay behind the newest event time (INTERVAL); needs watermark",
    "connector": "'kafka': read a Kafka topic (Flink / LaminarDB DDL; the same as FROM KAFKA (…))",
    # plausibility checks of event times, read by laminardb/engine/event_time.py (EventTimeRules)
    "event_time_range": "'FROM/TO' dates: event times outside are refused as bad rows ('off': no check)",
    "max_future": "an interval: rows further ahead of the newest event time are refused",
    "max_ahead_of_clock": "an interval (default '1 day'; 'off'): rows further ahead of the clock are refused",
}
#: CREATE STREAM / MATERIALIZED VIEW … WITH (…)
STREAM_OPTIONS = {
    "allowed_lateness": "keep each window open this long after it fired; late rows update it (INTERVAL)",
    # read by the planner (sql/binder.py): bounds the state of a join with no time condition
    "state_ttl": "a join with no time condition forgets a row once its side's watermark is this far past it (INTERVAL)",
}

# WITH ('connector' = 'kafka', …) of a source: key → FROM KAFKA option (None: accepted, unused)
_KAFKA_SOURCE_KEYS: dict[str, str | None] = {
    "topic": "topic",
    "format": "format",
    "value.format": "format",
    "properties.bootstrap.servers": "brokers",
    "bootstrap.servers": "brokers",
    "brokers": "brokers",
    "scan.startup.mode": "offset_reset",
    "auto.offset.reset": "offset_reset",
    "offset_reset": "offset_reset",
    # laminardb assigns partitions itself and keeps offsets in its checkpoints: a group id names
    # no consumer group, so it is accepted (Flink and LaminarDB scripts carry one) and unused
    "properties.group.id": None,
    "group.id": None,
    "group_id": None,
    "key": "key",
    "dead_letter_topic": "dead_letter_topic",
    "idle_timeout_ms": "idle_timeout_ms",
    "max_poll_records": "max_poll_records",
    "partitions": "partitions",
    "fetcher": "fetcher",
}
_STARTUP_MODES = {"earliest-offset": "earliest", "latest-offset": "latest",
                  "earliest": "earliest", "latest": "latest"}
_KAFKA_SINK_KEYS: dict[str, str | None] = {
    "topic": "topic",
    "format": "format",
    "value.format": "format",
    "properties.bootstrap.servers": "brokers",
    "bootstrap.servers": "brokers",
    "brokers": "brokers",
    "key": "key",
    "sink.delivery-guarantee": "delivery.guarantee",
    "delivery.guarantee": "delivery.guarantee",
}
_FILE_SINK_KEYS: dict[str, str | None] = {"path": "path", "format": "format", "partitioned_by": "partitioned_by",
                                          "partition.default-name": "partition_default_name"}
_DELTA_SINK_KEYS: dict[str, str | None] = {"path": "path", "table_uri": "path", "write_mode": "write_mode",
                                           "delivery.guarantee": "delivery.guarantee"}
_SINK_CONNECTORS = {"kafka": ("kafka", _KAFKA_SINK_KEYS), "filesystem": ("file", _FILE_SINK_KEYS),
                    "file": ("file", _FILE_SINK_KEYS), "delta-lake": ("delta_lake", _DELTA_SINK_KEYS),
                    "delta_lake": ("delta_lake", _DELTA_SINK_KEYS), "delta": ("delta_lake", _DELTA_SINK_KEYS)}

# the options each sink connector takes in CREATE SINK … INTO <connector> (…); ``kafka.*`` keys
# pass through to the Kafka client. Checked by the sink builders (connectors/sinks.py).
_SINK_OPTIONS = {
    "file": ("path", "format", "partitioned_by", "partition_default_name"),
    "kafka": ("brokers", "topic", "format", "key", "delivery.guarantee", "kafka.*"),
    "delta_lake": ("path", "write_mode", "delivery.guarantee"),
    # connectors/_iceberg_options.OPTIONS; catalog.* passes through to pyiceberg's load_catalog
    "iceberg": ("catalog", "catalog.type", "catalog.uri", "warehouse", "table", "delivery.guarantee", "catalog.*"),
}


def read_options(text: str, *, what: str = "WITH (…)") -> dict[str, str]:
    """``key = 'value', 'key' = value, key = INTERVAL '5' SECOND`` → {lower-case key: value text}."""
    opts: dict[str, str] = {}
    for item in split_top_level(text, what):
        m = _ITEM.match(item)
        if not m:
            raise SqlParseError(f"cannot read option {item.strip()!r} in {what}; write key = 'value'")
        key = m.group("key").lower()
        if key in opts:
            raise SqlParseError(f"option {key!r} is given twice in {what}")
        if m.group("str") is not None:
            opts[key] = m.group("str").replace("''", "'")
        else:
            opts[key] = m.group("iv") or m.group("bare")
    return opts


def _unknown(key: str, where: str, known) -> UnknownOptionError:
    return UnknownOptionError(f"unknown option {key!r} for {where}; known options: {', '.join(known)}")


def lateness_ms(value: str, what: str) -> int:
    """``INTERVAL '5' SECOND``, ``'5 seconds'``, ``'5s'`` or ``'5000'`` (ms) → milliseconds."""
    from laminardb.sql._dialect import parse_select
    from laminardb.sql.intervals import interval_ms

    v = value.strip()
    if re.fullmatch(r"\d+", v):
        return int(v)
    if not v.upper().startswith("INTERVAL"):
        if not re.fullmatch(r"\d+(\.\d+)?\s*[A-Za-z]+", v):
            raise SqlTypeError(f"{what} = {value!r}: write an interval such as INTERVAL '5' SECOND")
        v = f"INTERVAL '{v}'"
    ms = interval_ms(parse_select(f"SELECT {v}").expressions[0])
    if ms < 0:
        raise SqlTypeError(f"{what} must not be negative (got {value!r})")
    return ms


# --------------------------------------------------------------------------- sources

_EVENT_TIME_KEYS = ("event_time_range", "max_future", "max_ahead_of_clock")


@dataclass(frozen=True)
class SourceOptions:
    """What a source's WITH (…) says: its watermark and, for a connector, the FROM options."""

    watermark_col: str | None = None
    delay_ms: int | None = None
    connector: str | None = None
    connector_options: dict[str, str] | None = None


def source_options(name: str, opts: dict[str, str], columns: list[str]) -> SourceOptions:
    """Check a source's WITH keys and translate them (``name`` and ``columns`` for messages)."""
    where = f"source {name!r}"
    connector = opts.get("connector")
    if connector is not None:
        connector = connector.lower()
        if is_changelog_kind(connector):  # its keys: changelog_kinds.check_changelog_source
            return _changelog_source_options(name, opts, columns)
        if connector not in ("kafka",):
            raise UnknownOptionError(
                f"{where}: connector {connector!r} is not supported; laminardb sources read Kafka "
                "(WITH ('connector' = 'kafka', 'topic' = '…', 'properties.bootstrap.servers' = '…') or "
                "FROM KAFKA (brokers = '…', topic = '…')), database change streams ('postgres-cdc', "
                "'mysql-cdc'), or take rows from insert() (leave out "
                "'connector'); files: `laminardb run --input name=file.csv`")
    wm_col = None
    delay = None
    kafka: dict[str, str] = {}
    for key, value in opts.items():
        if key == "watermark":
            wm_col = value
        elif key == "allowed_lateness":
            delay = lateness_ms(value, f"{where}: allowed_lateness")
        elif key in ("connector", *_EVENT_TIME_KEYS):
            continue  # event-time rules: checked where the source is built (reactor, _event_time)
        elif connector == "kafka" and (key in _KAFKA_SOURCE_KEYS or key.startswith(("properties.", "kafka."))):
            target = _KAFKA_SOURCE_KEYS[key] if key in _KAFKA_SOURCE_KEYS else "kafka." + key.split(".", 1)[1]
            if target == "offset_reset":
                mode = _STARTUP_MODES.get(value.lower())
                if mode is None:
                    raise UnknownOptionError(
                        f"{where}: {key} = {value!r} is not supported; laminardb keeps Kafka offsets in "
                        "its own checkpoints: use 'earliest-offset' or 'latest-offset'")
                value = mode
            if target is not None:
                kafka[target] = value
        else:
            known = list(SOURCE_OPTIONS)
            if connector == "kafka":
                known += [k for k in _KAFKA_SOURCE_KEYS] + ["properties.*", "kafka.*"]
            raise _unknown(key, where, known)
    if wm_col is not None:
        folded = {c.lower(): c for c in columns}
        if wm_col not in columns and wm_col.lower() not in folded:
            raise UnknownOptionError(
                f"{where}: watermark = {wm_col!r} names no column; its columns are {', '.join(columns)}")
        wm_col = wm_col if wm_col in columns else folded[wm_col.lower()]
    if connector == "kafka":
        for need, flink in (("brokers", "properties.bootstrap.servers"), ("topic", "topic")):
            if need not in kafka:
                raise UnsupportedSqlError(f"{where}: connector 'kafka' needs '{flink}' = '…'")
    if delay is not None and wm_col is None:
        raise UnknownOptionError(
            f"{where}: allowed_lateness is the delay of the source's watermark: name its event-time "
            "column too, WITH (watermark = 'ts', allowed_lateness = INTERVAL '5' SECOND)")
    return SourceOptions(wm_col, delay, connector, kafka if connector else None)


def _changelog_source_options(name: str, opts: dict[str, str], columns: list[str]) -> SourceOptions:
    """A CDC source's WITH (…): the watermark keys are laminardb's, every other key goes to the
    connector (checked with the primary key in ``statements.source_from_options``)."""
    conn = {k: v for k, v in opts.items()
            if k not in ("connector", "watermark", "allowed_lateness", *_EVENT_TIME_KEYS)}
    rest = {k: v for k, v in opts.items() if k not in conn and k != "connector"}
    own = source_options(name, rest, columns)
    return SourceOptions(own.watermark_col, own.delay_ms, native_kind(opts["connector"]), conn)


# --------------------------------------------------------------------------- streams and sinks


def stream_options(name: str, opts: dict[str, str]) -> int | None:
    """Check a stream's WITH keys; returns its allowed lateness in ms (None: not given)."""
    lateness = None
    for key, value in opts.items():
        if key == "allowed_lateness":
            lateness = lateness_ms(value, f"stream {name!r}: allowed_lateness")
        elif key == "state_ttl":
            lateness_ms(value, f"stream {name!r}: state_ttl")  # checked here, applied by the planner
        else:
            raise _unknown(key, f"stream {name!r}", STREAM_OPTIONS)
    return lateness


def sink_with_options(name: str, opts: dict[str, str]) -> tuple[str, dict[str, str]]:
    """``CREATE SINK name AS SELECT … WITH ('connector' = …, …)`` → (connector, INTO options)."""
    where = f"sink {name!r}"
    connector = (opts.get("connector") or "").lower()
    if connector not in _SINK_CONNECTORS:
        got = f"connector {connector!r} is not supported" if connector else "needs 'connector' = '…'"
        raise UnknownOptionError(
            f"{where} {got}; use 'kafka', 'filesystem' or 'delta-lake', or write "
            "CREATE SINK name INTO FILE|KAFKA|DELTA_LAKE (…) AS SELECT …")
    native, keys = _SINK_CONNECTORS[connector]
    out: dict[str, str] = {}
    for key, value in opts.items():
        if key == "connector":
            continue
        if native == "kafka" and key.startswith(("properties.", "kafka.")) and key not in keys:
            out["kafka." + key.split(".", 1)[1]] = value
        elif key in keys:
            target = keys[key]
            if target is not None:
                out[target] = value
        else:
            extra = ["properties.*"] if native == "kafka" else []
            raise _unknown(key, f"{where} ({connector})", ["connector", *keys, *extra])
    return native, out


def known_sink_options(connector: str) -> tuple[str, ...]:
    """The option keys ``CREATE SINK … INTO <connector> (…)`` takes (``kafka.*``: a prefix)."""
    c = connector.lower()
    c = {"delta": "delta_lake", "deltalake": "delta_lake"}.get(c, c)
    if c not in _SINK_OPTIONS:
        raise UnknownOptionError(f"sink connector {connector!r} is not known; use FILE, KAFKA or DELTA_LAKE")
    return _SINK_OPTIONS[c]


# keys users reach for that FILE sinks do not take, with what to do instead
_FILE_SINK_HINTS = {
    "compression": "Parquet part files are written Snappy-compressed (pyarrow's default) and CSV/JSONL "
                   "uncompressed; leave 'compression' out (compress finished files outside laminardb)",
}


def check_sink_options(name: str, connector: str, opts: dict[str, str]) -> None:
    """Refuse a key the sink connector does not take (``UnknownOptionError``, LDB-1002, with the
    known keys): a misspelt ``fromat`` or an unsupported ``compression`` would otherwise be
    ignored and the sink would write something other than what the user asked for."""
    known = known_sink_options(connector)
    for key in opts:
        if key in known or any(k.endswith(".*") and key.startswith(k[:-1]) for k in known):
            continue
        err = _unknown(key, f"sink {name!r} ({connector.upper()})", known)
        hint = _FILE_SINK_HINTS.get(key) if connector.lower() == "file" else None
        if hint:
            err = UnknownOptionError(f"{err.message}. {hint}")
        raise err


def check_new_statement(stmt: object) -> None:
    """Checks of a statement the user writes now (``Connection.execute``), beyond parsing: the
    keys of ``INTO FILE (…)`` and of Flink ``filesystem`` tables. Recovery replays the catalog
    without them: keys accepted (and ignored) before these checks existed must not lock a
    durable database."""
    connector = getattr(stmt, "connector", None)
    if connector == "file" and hasattr(stmt, "from_name"):  # a CreateSink
        check_sink_options(stmt.name, "file", stmt.options)  # type: ignore[attr-defined]
    if getattr(stmt, "flink_connector", None) == "filesystem":
        check_file_table_keys(stmt.name, stmt.flink_options)  # type: ignore[attr-defined]


# filesystem sink options of Flink's file lifecycle (rolling, compaction, partition commit):
# accepted in an INSERT's table and not applied (flink_ddl._sink_options)
FILE_LIFECYCLE = ("sink.rolling-policy.", "sink.partition-commit.", "partition.time-extractor.", "auto-compaction",
                  "compaction.", "sink.parallelism", "sink.shuffle-by-partition.")
# every key a Flink filesystem table takes (besides the lifecycle prefixes above): anything else —
# 'formt', 'csv.field-delimiter', 'source.monitor-interval' — is refused, not silently ignored
FILE_TABLE_KEYS = ("connector", "path", "format", "partition.default-name")


def check_file_table_keys(name: str, opts: dict[str, str]) -> None:
    """Refuse a key a filesystem table does not take (``UnknownOptionError``, LDB-1002)."""
    for key in opts:
        if key not in FILE_TABLE_KEYS and not key.startswith(FILE_LIFECYCLE):
            known = [*FILE_TABLE_KEYS, *(p + "*" if p.endswith(".") else p for p in FILE_LIFECYCLE)]
            raise UnknownOptionError(f"unknown option {key!r} for filesystem table {name!r}; known options: "
                                     f"{', '.join(known)} (the lifecycle ones are accepted and not applied)")
