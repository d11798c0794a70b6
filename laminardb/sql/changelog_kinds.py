"""The changelog (CDC) source kinds: which connectors read a database's change stream, the
options each takes, and the rule that such a source declares its PRIMARY KEY.

Why here: the SQL layer checks a ``CREATE SOURCE … FROM POSTGRES_CDC (…)`` / Flink
``WITH ('connector' = 'postgres-cdc', …)`` when it is parsed, below the connectors that read
it (``laminardb/connectors/changelog_source.py`` registers those by the same kind names).

Entry points: ``CHANGELOG_KINDS``, ``is_changelog_kind(kind)``, ``native_kind(name)`` (a
Flink connector name or a native kind → the native kind) and ``check_changelog_source``.
Option names are Flink CDC's (``hostname``, ``database-name``, ``slot.name``, …).
"""

from __future__ import annotations

from dataclasses import dataclass

from laminardb.sql.exceptions import UnknownOptionError, UnsupportedSqlError

__all__ = ["ChangelogKind", "CHANGELOG_KINDS", "is_changelog_kind", "native_kind", "check_changelog_source"]


@dataclass(frozen=True)
class ChangelogKind:
    """One CDC connector: its Flink name, the options it needs and those it also takes."""

    flink_name: str
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()


CHANGELOG_KINDS: dict[str, ChangelogKind] = {
    "postgres_cdc": ChangelogKind(
        "postgres-cdc",
        required=("hostname", "username", "database-name", "table-name", "slot.name"),
        optional=("port", "password", "schema-name", "decoding.plugin.name", "publication.name",
                  "connect.timeout")),
    # reserved for the MySQL CDC connector (its class registers under the same kind)
    "mysql_cdc": ChangelogKind(
        "mysql-cdc",
        required=("hostname", "username", "database-name", "table-name"),
        optional=("port", "password", "server-id", "server-time-zone", "scan.startup.mode",
                  "scan.incremental.snapshot.chunk.size",
                  "connect.timeout")),
}
_BY_FLINK_NAME = {k.flink_name: name for name, k in CHANGELOG_KINDS.items()}


def native_kind(name: str | None) -> str | None:
    """``'postgres-cdc'`` or ``'postgres_cdc'`` → ``'postgres_cdc'``; None when not a CDC kind."""
    if name is None:
        return None
    key = name.lower()
    if key in CHANGELOG_KINDS:
        return key
    return _BY_FLINK_NAME.get(key)


def is_changelog_kind(kind: str | None) -> bool:
    """True for a connector whose source is a changelog keyed by its primary key."""
    return native_kind(kind) is not None


def check_changelog_source(source: str, kind: str, options: dict[str, str], primary_key: tuple[str, ...],
                           columns: list[str]) -> dict[str, str]:
    """Check a CDC source's declaration; returns its options (``'connector'`` left out).

    A CDC source is a changelog keyed by its primary key: updates and deletes retract the row
    they replace, so the key must be declared (``PRIMARY KEY (…) NOT ENFORCED``, as in Flink CDC).
    """
    native = native_kind(kind)
    assert native is not None  # callers ask is_changelog_kind first
    spec = CHANGELOG_KINDS[native]
    where = f"source {source!r} ({spec.flink_name})"
    if not primary_key:
        raise UnsupportedSqlError(
            f"{where}: a CDC source is a changelog keyed by its primary key; declare it in the column "
            f"list, e.g. CREATE SOURCE {source} ({columns[0] if columns else 'id'} BIGINT, …, "
            f"PRIMARY KEY ({columns[0] if columns else 'id'}) NOT ENFORCED) FROM {native.upper()} (…)")
    out = {k: v for k, v in options.items() if k != "connector"}
    known = ("connector", *spec.required, *spec.optional)
    for key in out:
        if key not in known and not key.startswith("debezium."):
            raise UnknownOptionError(f"unknown option {key!r} for {where}; known options: "
                                     f"{', '.join(known)}, debezium.* (accepted, unused)")
    missing = [k for k in spec.required if not out.get(k)]
    if missing:
        listed = ", ".join(f"'{k}' = '…'" for k in missing)
        raise UnsupportedSqlError(f"{where}: needs {listed}")
    return {k: v for k, v in out.items() if not k.startswith("debezium.")}
