"""The generic parts of changelog (CDC) sources that need no server: declaration checks and the
column-wise text → Arrow conversion. The sources themselves are tested against real servers
(test_postgres_cdc.py)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from laminardb.connectors.changelog_source import (
    check_declared_type,
    column_family,
    text_columns_batch,
)
from laminardb.connectors.exceptions import CdcDataError, CdcSchemaError
from laminardb.sql import ddl
from laminardb.sql.exceptions import UnknownOptionError, UnsupportedSqlError
from laminardb.sql.plan import WEIGHT

_OPTS = "hostname = 'h', username = 'u', database-name = 'd', table-name = 't', slot.name = 's'"


def test_cdc_source_needs_its_primary_key() -> None:
    with pytest.raises(UnsupportedSqlError, match=r"PRIMARY KEY \(id\) NOT ENFORCED"):
        ddl.parse_statement(f"CREATE SOURCE o (id BIGINT, v DOUBLE) FROM POSTGRES_CDC ({_OPTS})")
    stmt = ddl.parse_statement(f"CREATE SOURCE o (id BIGINT, v DOUBLE, PRIMARY KEY (id) NOT ENFORCED) "
                               f"FROM POSTGRES_CDC ({_OPTS})")
    assert stmt.connector == "postgres_cdc" and stmt.primary_key == ("id",)


def test_cdc_options_are_checked() -> None:
    with pytest.raises(UnknownOptionError, match="'topic'.*slot.name"):
        ddl.parse_statement(f"CREATE SOURCE o (id BIGINT, PRIMARY KEY (id) NOT ENFORCED) "
                            f"FROM POSTGRES_CDC ({_OPTS}, topic = 'x')")
    with pytest.raises(UnsupportedSqlError, match="needs 'slot.name'"):
        ddl.parse_statement("CREATE SOURCE o (id BIGINT, PRIMARY KEY (id) NOT ENFORCED) FROM POSTGRES_CDC "
                            "(hostname = 'h', username = 'u', database-name = 'd', table-name = 't')")


def test_flink_cdc_table_is_a_source_and_refuses_insert_into() -> None:
    script = ("CREATE TABLE o (id BIGINT, PRIMARY KEY (id) NOT ENFORCED) WITH ('connector' = 'mysql-cdc', "
              "'hostname' = 'h', 'username' = 'u', 'database-name' = 'd', 'table-name' = 't');"
              "INSERT INTO o SELECT id FROM o")
    with pytest.raises(UnsupportedSqlError, match="reads a database's changes"):
        ddl.parse_script_with_text(script)


def test_declared_types_widen_never_narrow() -> None:
    check_declared_type("s", "a", "int4", column_family("postgres", "int4"), pa.int64())
    with pytest.raises(CdcSchemaError, match="declare it BIGINT"):
        check_declared_type("s", "a", "int8", column_family("postgres", "int8"), pa.int32())
    with pytest.raises(CdcSchemaError, match="'uuid'.*leave the column out"):
        check_declared_type("s", "a", "uuid", column_family("postgres", "uuid"), pa.string())


def test_text_columns_convert_column_wise_with_utc_timestamps() -> None:
    schema = pa.schema([("i", pa.int64()), ("b", pa.bool_()), ("ts", pa.timestamp("us")),
                        ("tz", pa.timestamp("ms")), ("d", pa.date32()), ("n", pa.float64())])
    fams = ["bigint", "boolean", "timestamp", "timestamptz", "date", "numeric"]
    cols = [["1", None], ["t", "f"], ["2024-01-02 03:04:05.123456", None],
            ["2024-01-02 03:04:05.5+05:30", "2024-01-02 03:04:05-08"], ["2024-02-29", None], ["1.25", "NaN"]]
    batch = text_columns_batch(schema, fams, cols, [1, -1], source="s")
    assert batch.schema.names[-1] == WEIGHT
    rows = batch.to_pylist()
    assert rows[0]["tz"] == dt.datetime(2024, 1, 1, 21, 34, 5, 500000)
    assert rows[1]["tz"] == dt.datetime(2024, 1, 2, 11, 4, 5)
    assert rows[0]["i"] == 1 and rows[1]["i"] is None and rows[0]["b"] and rows[1]["b"] is False
    assert rows[0][WEIGHT] == 1 and rows[1][WEIGHT] == -1
    with pytest.raises(CdcDataError, match="'ts'"):
        text_columns_batch(schema.remove(5).remove(4).remove(3).remove(1).remove(0), ["timestamp"],
                           [["infinity"]], [1], source="s")


class _FailingOnce:
    """A polled connector whose checkpoint_committed hook fails the first time."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def checkpoint_committed(self, state: dict) -> None:
        self.calls.append(state)
        if len(self.calls) == 1:
            raise ConnectionError("server unreachable")

    def close(self) -> None:
        pass


def test_checkpoint_committed_gets_the_oldest_kept_position_and_survives_a_failure(tmp_path, caplog) -> None:
    """The hook hears the position of the oldest checkpoint kept (recovery may fall back to it
    when newer ones are damaged); a failing hook is logged and called again next time."""
    import laminardb

    conn = laminardb.open(str(tmp_path / "db"), config={"checkpoint_retain": 3})
    try:
        conn.execute("CREATE SOURCE s (x BIGINT)")
        node, fake = conn.engine.node("s"), _FailingOnce()
        node.connector = fake
        for lsn in (1, 2, 3, 4):
            node.connector_state = {"lsn": lsn}
            conn.checkpoint()  # the first hook call fails: the checkpoint stands
        assert "releasing changes up to checkpoint 1 failed" in caplog.text and "server unreachable" in caplog.text
        assert fake.calls == [{"lsn": 1}, {"lsn": 1}, {"lsn": 1}, {"lsn": 2}]
    finally:
        conn.close()
    conn = laminardb.open(str(tmp_path / "db"), config={"checkpoint_retain": 3})
    try:  # the oldest kept checkpoint was written by the run before: its positions are read from disk
        from laminardb.checkpoint.store import CheckpointStore

        node, fake = conn.engine.node("s"), _FailingOnce()
        fake.calls.append({})  # no failure this time
        node.connector, node.connector_state = fake, {"lsn": 99}
        conn.checkpoint()
        oldest = CheckpointStore(tmp_path / "db").complete()[0]
        assert oldest <= 4 and fake.calls[1:] == [{"lsn": oldest}]  # checkpoint i recorded lsn i
    finally:
        conn.engine.node("s").connector = None
        conn.close()
