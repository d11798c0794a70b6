"""The Delta mode's checkpoint coordinator commits a PostgreSQL sink it rebuilt through
``make_sink``: one transaction per epoch, each epoch once, also after a coordinator restart
(its rebuilt sink reads ``laminardb_epochs`` and skips what is in)."""

from __future__ import annotations

import pyarrow as pa

from laminardb.checkpoint.spark_coordinator import CheckpointCoordinator
from tests._services.fixtures import postgres_server  # noqa: F401
from tests.coordinator._fake_head import FakeHead
from tests.coordinator._oracle import assert_exactly_once


def test_the_coordinator_commits_a_postgres_sink_once_per_epoch(tmp_path, spark, postgres_server) -> None:  # noqa: F811
    dbname = postgres_server.create_database("coord")
    url = f"postgresql://postgres@{postgres_server.host}:{postgres_server.port}/{dbname}"
    sinks = {"out_pg": f"CREATE SINK out_pg INTO POSTGRES (url = '{url}', table = 'out_pg') AS SELECT * FROM src"}
    head = FakeHead(tmp_path / "head", sinks, rows_per_epoch=300)
    conn = postgres_server.connect(dbname)
    coords = []
    try:
        for checkpoints in (2, 1):  # a second coordinator resumes from the first one's registry
            coord = CheckpointCoordinator(tmp_path / "state", head_resolver=lambda name: head)
            coords.append(coord)
            coord.register("db1", interval_s=None, checkpoint_dir=str(tmp_path / "ckpt"))
            for _ in range(checkpoints):
                coord.checkpoint_now("db1")
            coord.stop()
        assert head.state()["last_committed"] == 3
        with conn.cursor() as cur:
            cur.execute("SELECT id, k, v, ts FROM out_pg ORDER BY id")
            got = pa.Table.from_pylist([dict(zip(("id", "k", "v", "ts"), r, strict=True)) for r in cur.fetchall()])
            assert_exactly_once(got.cast(pa.schema([("id", pa.int64()), ("k", pa.string()), ("v", pa.float64()),
                                                     ("ts", pa.timestamp("ms"))])),
                                "out_pg", head.state()["committed_upto"])
            cur.execute("SELECT epoch, rows FROM laminardb_epochs ORDER BY epoch")
            assert cur.fetchall() == [(1, 300), (2, 300), (3, 300)]
    finally:
        for c in coords:
            c.stop()
        conn.close()
