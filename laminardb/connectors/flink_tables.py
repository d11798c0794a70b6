"""The polled sources behind Flink ``datagen`` and ``filesystem`` tables (``sql/flink_ddl.py``).

Entry point: ``source_connectors(fallback)``, which a connection installs as its reactor's
``make_source_connector``: a ``datagen`` / ``filesystem`` source's options become a spec
(``sql/table_specs.py``, checked there at CREATE TABLE) and the spec a ``DatagenSource`` or
``FileTableSource``; other kinds (kafka, the CDC kinds) go to ``fallback``. A ``jdbc`` / ``postgres`` lookup table has none
(``sql/lookup_tables.py``: its join operator reads it).
"""

from __future__ import annotations

from laminardb.connectors.datagen import DatagenSource
from laminardb.connectors.file_source import FileTableSource
from laminardb.sql.lookup_tables import LOOKUP_KIND
from laminardb.sql.table_specs import DatagenSpec, FileTableSpec, source_spec

__all__ = ["build_source", "source_connectors"]


def build_source(spec: DatagenSpec | FileTableSpec, restore_state: dict | None = None):
    """The polled source of a table spec; ``restore_state`` (a checkpoint's) resumes it."""
    if isinstance(spec, DatagenSpec):
        return DatagenSource.from_spec(spec, restore_state)
    return FileTableSource.from_spec(spec, restore_state)


def source_connectors(fallback):
    """``Reactor.make_source_connector`` extended with the datagen and filesystem tables'
    polled connectors; other kinds (kafka) go to ``fallback``."""

    def make(kind: str, node, options: dict[str, str], restore_state: dict | None = None):
        if kind == LOOKUP_KIND:  # a jdbc / postgres table: read by lookup joins, never polled
            return None
        spec = source_spec(kind, node.name, node.schema, options)
        if spec is not None:
            return build_source(spec, restore_state)
        return fallback(kind, node, options) if restore_state is None else fallback(kind, node, options,
                                                                                       restore_state)

    return make
