"""What a Flink ``'connector' = 'jdbc'`` / ``'postgres'`` table is: a PostgreSQL table read on
demand by a processing-time lookup join, never a stream.

Entry points: ``LOOKUP_CONNECTORS``, ``check_lookup_options(name, options)`` (CREATE TABLE:
refuses unknown keys and bad values, returns the normalized options a source node keeps) and
``lookup_spec(name, schema, primary_key, options) -> LookupTableSpec`` (what the join operator
and ``connectors/postgres_lookup.py`` read). Options are Flink's JDBC connector's (the legacy
``lookup.cache.*`` keys and the 1.16+ ``lookup.partial-cache.*`` ones); why checked here and not
at the first lookup: a typo in a cache option must fail the DDL, not a running pipeline.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

import pyarrow as pa

from laminardb.errors import LookupTableConfigError
from laminardb.sql.options import lateness_ms

__all__ = ["LOOKUP_CONNECTORS", "LOOKUP_KIND", "LookupTableSpec", "check_lookup_options", "lookup_spec"]

LOOKUP_CONNECTORS = ("jdbc", "postgres")
LOOKUP_KIND = "jdbc_lookup"  # the source connector kind of such a table (no polled connector)

# Flink's 1.16+ names → the legacy ones this module reads
_SYNONYMS = {"lookup.partial-cache.max-rows": "lookup.cache.max-rows",
             "lookup.partial-cache.expire-after-write": "lookup.cache.ttl",
             "lookup.partial-cache.cache-missing-key": "lookup.cache.caching-missing-key"}
_KEYS = ("connector", "url", "table-name", "username", "password", "driver", "lookup.cache",
         "lookup.cache.max-rows", "lookup.cache.ttl", "lookup.cache.caching-missing-key",
         "lookup.max-retries", *_SYNONYMS)
_URL_PARAMS = {"user": "user", "password": "password", "sslmode": "sslmode", "connecttimeout": "connect_timeout",
               "connect_timeout": "connect_timeout", "applicationname": "application_name",
               "application_name": "application_name"}
_DEFAULT_PORT = 5432


@dataclass(frozen=True)
class LookupTableSpec:
    """A PostgreSQL table a lookup join reads: where (``host``, ``port``, ``dbname``,
    ``table``: schema-qualified parts), as whom, and how its rows are cached
    (``cache_max_rows`` 0: no cache; ``cache_ttl_ms``; ``cache_missing``: remember absent keys)."""

    name: str
    schema: pa.Schema
    primary_key: tuple[str, ...]
    host: str
    port: int
    dbname: str
    table: tuple[str, ...]
    user: str | None = None
    password: str | None = field(default=None, repr=False)  # never shown (repr, errors, metrics)
    params: tuple[tuple[str, str], ...] = ()  # libpq keywords from the url (sslmode, …)
    cache_max_rows: int = 0
    cache_ttl_ms: int = 0
    cache_missing: bool = True
    max_retries: int = 3
    # how its rows are fetched: ``connectors.postgres_lookup.PostgresLookup``, given by the engine
    # (the operators may not import the connectors: .importlinter)
    fetcher: Callable[[LookupTableSpec], Any] | None = field(default=None, repr=False, compare=False)

    def open(self):
        """A new fetcher of this table's rows (``fetch(key_cols, keys)``, ``close()``, counters)."""
        if self.fetcher is None:
            raise LookupTableConfigError(f"lookup table {self.name!r}: no fetcher was given (built outside an engine)")
        return self.fetcher(self)

    def where(self) -> str:
        """``host:port/db table`` for messages (no credentials)."""
        return f"PostgreSQL {self.host}:{self.port}/{self.dbname}, table {'.'.join(self.table)!r}"


def _refuse(name: str, why: str) -> LookupTableConfigError:
    return LookupTableConfigError(f"lookup table {name!r}: {why}")


def _parse_url(name: str, url: str) -> tuple[str, int, str, dict[str, str]]:
    m = re.fullmatch(r"(?:jdbc:)?(postgresql|postgres)://([^/?#]*)/([^?#]+)(?:\?(.*))?", url.strip())
    if not m:
        raise _refuse(name, f"'url' = {url!r} is no PostgreSQL url; write 'jdbc:postgresql://host:5432/db' (or "
                            "'postgresql://host:5432/db'); laminardb's lookup joins read PostgreSQL only")
    hostport, db, query = m.group(2), unquote(m.group(3)), m.group(4) or ""
    userinfo = None
    if "@" in hostport:
        userinfo, hostport = hostport.rsplit("@", 1)
    hm = re.fullmatch(r"(\[[^\]]+\]|[^:]*)(?::(\d+))?", hostport)
    if not hm or not hm.group(1):
        raise _refuse(name, f"'url' names no host ({hostport!r}); write 'jdbc:postgresql://host:5432/db'")
    params: dict[str, str] = {}
    if userinfo:
        user, _, pw = userinfo.partition(":")
        params["user"] = unquote(user)
        if pw:
            params["password"] = unquote(pw)
    for k, v in parse_qsl(query, keep_blank_values=True):
        key = _URL_PARAMS.get(k.lower())
        if key is None:
            raise _refuse(name, f"url parameter {k!r} is not supported; known: {', '.join(sorted(set(_URL_PARAMS)))}")
        params[key] = v
    return hm.group(1).strip("[]"), int(hm.group(2) or _DEFAULT_PORT), db, params


def _int(name: str, key: str, value: str, lo: int) -> int:
    if not re.fullmatch(r"\s*\d+\s*", value) or int(value) < lo:
        raise _refuse(name, f"{key!r} = {value!r}: write a whole number ≥ {lo}")
    return int(value)


def _bool(name: str, key: str, value: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise _refuse(name, f"{key!r} = {value!r}: write 'true' or 'false'")
    return value.strip().lower() == "true"


def check_lookup_options(name: str, opts: dict[str, str]) -> dict[str, str]:
    """Check a jdbc/postgres table's WITH options (raises ``LookupTableConfigError``); returns
    them with Flink's 1.16+ cache keys renamed to the legacy ones."""
    unknown = [k for k in opts if k not in _KEYS]
    if unknown:
        scan = " (laminardb reads such a table only by lookup: 'scan.*' does not apply)" if any(
            k.startswith("scan.") for k in unknown) else ""
        raise _refuse(name, f"unknown option {unknown[0]!r}{scan}; known: {', '.join(_KEYS[1:])}")
    out = {_SYNONYMS.get(k, k): v for k, v in opts.items() if k != "connector"}
    for key in ("url", "table-name"):
        if not out.get(key, "").strip():
            raise _refuse(name, f"needs {key!r} = '…' (e.g. 'url' = 'jdbc:postgresql://127.0.0.1:5432/db', "
                                "'table-name' = 'customers')")
    driver = out.get("driver", "org.postgresql.Driver")
    if driver != "org.postgresql.Driver":
        raise _refuse(name, f"'driver' = {driver!r}: laminardb's lookup joins read PostgreSQL only "
                            "(org.postgresql.Driver)")
    mode = out.get("lookup.cache", "").upper()
    if mode not in ("", "NONE", "PARTIAL"):
        raise _refuse(name, f"'lookup.cache' = {out['lookup.cache']!r}: write 'NONE' or 'PARTIAL'")
    _parse_url(name, out["url"])
    rows = _int(name, "lookup.cache.max-rows", out.get("lookup.cache.max-rows", "0"), 0)
    if "lookup.cache.ttl" in out:
        try:
            ttl = lateness_ms(out["lookup.cache.ttl"], f"lookup table {name!r}: 'lookup.cache.ttl'")
        except Exception as e:  # noqa: BLE001 - the duration parser's own message, as a config error
            raise _refuse(name, f"'lookup.cache.ttl' = {out['lookup.cache.ttl']!r} is no duration; write e.g. "
                                "'10 s', '1 min' or '500 ms'") from e
        if ttl <= 0:
            raise _refuse(name, "'lookup.cache.ttl' must be positive")
    if rows > 0 and "lookup.cache.ttl" not in out:
        raise _refuse(name, "'lookup.cache.max-rows' needs 'lookup.cache.ttl' too (how long a cached row may "
                            "be used, e.g. '10 s'), as in Flink")
    if mode == "PARTIAL" and rows == 0:
        raise _refuse(name, "'lookup.cache' = 'PARTIAL' needs 'lookup.partial-cache.max-rows'")
    _bool(name, "lookup.cache.caching-missing-key", out.get("lookup.cache.caching-missing-key", "true"))
    _int(name, "lookup.max-retries", out.get("lookup.max-retries", "3"), 0)
    return out


def lookup_spec(name: str, schema: pa.Schema, primary_key: tuple[str, ...], opts: dict[str, str], *,
                fetcher: Callable[[LookupTableSpec], Any] | None = None) -> LookupTableSpec:
    """The spec of a table whose options ``check_lookup_options`` returned; ``fetcher(spec)``
    opens what reads its rows."""
    opts = check_lookup_options(name, opts)
    host, port, db, params = _parse_url(name, opts["url"])
    user = opts.get("username") or params.pop("user", None)
    password = opts.get("password") or params.pop("password", None)
    params.pop("user", None)
    params.pop("password", None)
    off = opts.get("lookup.cache", "").upper() == "NONE"
    rows = 0 if off else int(opts.get("lookup.cache.max-rows", "0"))
    ttl = lateness_ms(opts["lookup.cache.ttl"], "lookup.cache.ttl") if rows and "lookup.cache.ttl" in opts else 0
    table = tuple(p.strip().strip('"') for p in opts["table-name"].split("."))
    return LookupTableSpec(name, schema, tuple(primary_key), host, port, db, table, user, password,
                           tuple(sorted(params.items())), rows, ttl,
                           opts.get("lookup.cache.caching-missing-key", "true").strip().lower() == "true",
                           int(opts.get("lookup.max-retries", "3")), fetcher)
