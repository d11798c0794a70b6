"""The options of ``INTO ICEBERG (…)`` → the catalog properties pyiceberg's ``load_catalog``
takes, and the secrets among them that no error message may show.

Entry point: :func:`iceberg_options`. Why a module of its own: the sink (``iceberg_sink.py``)
then holds only the two-phase commit; every rule about keys, defaults and redaction is here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from laminardb.connectors.exceptions import IcebergConfigError

__all__ = ["IcebergOptions", "iceberg_options", "OPTIONS"]

#: the keys INTO ICEBERG (…) takes; ``catalog.<property>`` passes through to load_catalog
OPTIONS = ("catalog", "catalog.type", "catalog.uri", "warehouse", "table", "delivery.guarantee",
           "catalog.*")
_CATALOG_TYPES = ("sql", "rest")
# catalog properties whose values are secrets (passwords, OAuth credentials, tokens, keys)
_SECRET_KEY = re.compile(r"(?i)password|secret|token|credential|access[-_.]?key|session[-_.]?key")
_URL_PASSWORD = re.compile(r"(?P<head>://[^:/@\s]+:)[^@\s]+@")


@dataclass(frozen=True)
class IcebergOptions:
    """What ``INTO ICEBERG (…)`` says, checked: the catalog to load and the table to write."""

    catalog_name: str
    properties: dict[str, str]  # for pyiceberg.catalog.load_catalog(catalog_name, **properties)
    namespace: tuple[str, ...]
    table: str
    local_warehouse: Path | None  # the warehouse directory when it is on this machine
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @property
    def identifier(self) -> str:
        return ".".join((*self.namespace, self.table))

    def redact(self, text: str) -> str:
        """``text`` with every secret of the options (and any URL password) replaced by ***."""
        text = _URL_PASSWORD.sub(r"\g<head>***@", text)
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def describe(self) -> str:
        """The catalog as messages may name it: its type and URI, without a password."""
        return self.redact(f"{self.properties['type']} catalog {self.catalog_name!r} at "
                           f"{self.properties.get('uri', '?')}")


def iceberg_options(name: str, options: dict[str, str]) -> IcebergOptions:
    """Check ``options`` of the Iceberg sink ``name`` and build the catalog properties.

    Raises:
        IcebergConfigError: an unknown key, an unsupported catalog type or delivery guarantee,
            a missing ``table``/``warehouse``/``catalog.uri``, a table name without a namespace.
    """
    where = f"Iceberg sink {name!r}"
    unknown = sorted(k for k in options if k not in OPTIONS and not k.startswith("catalog."))
    if unknown:
        msg = (f"{where}: unknown option {', '.join(map(repr, unknown))}; the options are "
               f"{', '.join(OPTIONS)} (catalog.<property>: passed to pyiceberg's load_catalog)")
        raise IcebergConfigError(msg)
    guarantee = str(options.get("delivery.guarantee", "exactly-once")).lower()
    if guarantee != "exactly-once":
        msg = (f"{where}: delivery.guarantee {guarantee!r} is not supported; an Iceberg sink "
               "commits one snapshot per checkpoint, so it is always 'exactly-once'")
        raise IcebergConfigError(msg)
    namespace, table = _table_name(where, options.get("table"))
    props = {k.split(".", 1)[1]: v for k, v in options.items() if k.startswith("catalog.")}
    props["type"] = kind = props.get("type", "sql").lower()
    if kind not in _CATALOG_TYPES:
        msg = (f"{where}: catalog.type {kind!r} is not supported; use 'sql' (an SQLAlchemy "
               "database: SQLite, PostgreSQL) or 'rest' (an Iceberg REST catalog)")
        raise IcebergConfigError(msg)
    local = None
    warehouse = options.get("warehouse")
    if warehouse:
        props["warehouse"], local = _warehouse(where, warehouse)
    elif kind == "sql":
        msg = (f"{where} needs warehouse = '…' (a directory or file:// URI where the table's "
               "data and metadata files go): a SQL catalog keeps only their locations")
        raise IcebergConfigError(msg)
    if "uri" not in props:
        if kind == "rest":
            raise IcebergConfigError(f"{where} needs catalog.uri = 'http://…' (the REST catalog)")
        if local is None:
            msg = (f"{where}: the warehouse {warehouse!r} is not on this machine, so there is no "
                   "default SQLite catalog beside it: give catalog.uri = 'postgresql+psycopg2://…' "
                   "(or another SQLAlchemy URL)")
            raise IcebergConfigError(msg)
        props["uri"] = f"sqlite:///{local / 'catalog.db'}"
    return IcebergOptions(catalog_name=str(options.get("catalog") or "laminardb"),
                          properties=props, namespace=namespace, table=table,
                          local_warehouse=local, secrets=_secrets(props))


def _table_name(where: str, value: str | None) -> tuple[tuple[str, ...], str]:
    parts = tuple((value or "").split("."))
    if len(parts) < 2 or not all(p.strip() for p in parts):
        got = f"table = {value!r} has no namespace" if value else "needs table = 'namespace.name'"
        raise IcebergConfigError(f"{where} {got}; write table = 'namespace.name' (e.g. 'db.events')")
    return parts[:-1], parts[-1]


def _warehouse(where: str, value: str) -> tuple[str, Path | None]:
    """The warehouse as a URI for pyiceberg, and its directory when local (created if missing)."""
    if "://" in value and not value.startswith("file://"):
        return value, None  # s3://, gs://, …: pyiceberg's FileIO writes there
    path = Path(unquote(urlsplit(value).path) if value.startswith("file://") else value)
    path = Path(os.path.abspath(path))  # the table stays put when the process changes directory
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = f"{where}: cannot create the warehouse directory {str(path)!r}: {exc}; fix its permissions"
        raise IcebergConfigError(msg) from exc
    return path.as_uri(), path


def _secrets(props: dict[str, str]) -> tuple[str, ...]:
    found = [v for k, v in props.items() if _SECRET_KEY.search(k) and v]
    password = urlsplit(props.get("uri", "")).password
    if password:
        found += [password, unquote(password)]
    return tuple(sorted(set(found), key=len, reverse=True))  # the longest first: no partial masks
