"""A fake database head for the coordinator tests: the four checkpoint calls of the real
head (``prepare_checkpoint``, ``commit_checkpoint``, ``abort_checkpoint``,
``checkpoint_status``) over a deterministic input, with its state in a directory so a test
can crash the coordinator's process and build the head again.

Model of the engine it stands in for: every prepare sees ``rows_per_epoch`` new input rows
(ids counting up from 0); the staged output of epoch ``e`` is every row since the last
*committed* checkpoint (so the rows of an aborted epoch are staged again by the next one);
commit moves the committed mark. Each sink gets its own deterministic subset of the rows,
staged as one Parquet file per sink and epoch, like the real head (``StagedSink``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string()), ("v", pa.float64()),
                    ("ts", pa.timestamp("ms"))])
_BASE_MS = 1_700_000_000_000


def rows(lo: int, hi: int) -> pa.Table:
    """Input rows with ids in [lo, hi)."""
    ids = np.arange(lo, hi, dtype=np.int64)
    keys = pc.binary_join_element_wise("k", pa.array((ids % 7).astype(str)), "")
    return pa.table({"id": ids, "k": keys, "v": ids * 0.5,
                     "ts": pa.array(_BASE_MS + ids * 1000, pa.timestamp("ms"))}, schema=SCHEMA)


def sink_rows(sink: str, lo: int, hi: int) -> pa.Table:
    """What sink ``sink`` receives of the input rows [lo, hi): all, or the even ids of sinks
    named ``*even*``."""
    t = rows(lo, hi)
    if "even" in sink:
        t = t.filter(pc.equal(pc.bit_wise_and(t["id"], 1), 0))
    return t


class FakeHead:
    """See the module docstring. ``sinks``: name → CREATE SINK text."""

    def __init__(self, directory: str | os.PathLike[str], sinks: dict[str, str] | None = None, *,
                 rows_per_epoch: int = 1000) -> None:
        self.dir = Path(directory)
        (self.dir / "stage").mkdir(parents=True, exist_ok=True)
        self.sinks = dict(sinks or {})
        self.rows_per_epoch = rows_per_epoch
        self.fail_prepare = 0  # the next n prepares raise
        self.calls: list[tuple[str, int]] = []

    # -- persisted state ------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        try:
            return json.loads((self.dir / "head.json").read_text())
        except FileNotFoundError:
            return {"ingested": 0, "committed_upto": 0, "last_committed": 0, "pending": {},
                    "calls": []}

    def _save(self, st: dict[str, Any]) -> None:
        tmp = self.dir / "head.json.tmp"
        tmp.write_text(json.dumps(st))
        os.replace(tmp, self.dir / "head.json")

    def _log(self, st: dict[str, Any], call: str, epoch: int) -> None:
        st["calls"].append([call, epoch])
        self.calls.append((call, epoch))

    def _stage_path(self, sink: str, epoch: int) -> Path:
        return self.dir / "stage" / f"{sink}-{epoch:06d}.parquet"

    # -- the head interface ---------------------------------------------------------------
    def prepare_checkpoint(self, epoch: int) -> dict[str, Any]:
        st = self.state()
        self._log(st, "prepare", epoch)
        if self.fail_prepare:
            self.fail_prepare -= 1
            self._save(st)
            raise TimeoutError(f"barrier {epoch} not aligned in time (injected)")
        st["ingested"] += self.rows_per_epoch
        lo, hi = st["committed_upto"], st["ingested"]
        sinks = {}
        for name, sql in self.sinks.items():
            data = sink_rows(name, lo, hi)
            stage = None
            if data.num_rows:
                stage = self._stage_path(name, epoch)
                pq.write_table(data, stage, row_group_size=256)  # several row groups a file
            sinks[name] = {"sql": sql, "schema": SCHEMA.serialize().to_pybytes(),
                           "stage": str(stage) if stage else None, "rows": data.num_rows}
        st["pending"][str(epoch)] = hi
        self._save(st)
        return {"epoch": epoch, "manifest_ref": str(self.dir / "manifests" / str(epoch)),
                "bytes": 100 * epoch, "stall_s": 0.001, "sinks": sinks, "sources": {}}

    def commit_checkpoint(self, epoch: int) -> None:
        st = self.state()
        self._log(st, "commit", epoch)
        if str(epoch) in st["pending"] and epoch > st["last_committed"]:
            st["committed_upto"] = st["pending"][str(epoch)]
            st["last_committed"] = epoch
        for e in [e for e in st["pending"] if int(e) <= epoch]:
            del st["pending"][e]
            for name in self.sinks:
                self._stage_path(name, int(e)).unlink(missing_ok=True)
        self._save(st)

    def abort_checkpoint(self, epoch: int) -> None:
        st = self.state()
        self._log(st, "abort", epoch)
        st["pending"].pop(str(epoch), None)
        for name in self.sinks:
            self._stage_path(name, epoch).unlink(missing_ok=True)
        self._save(st)

    def checkpoint_status(self) -> dict[str, Any]:
        st = self.state()
        return {"last_committed": st["last_committed"], "pending": sorted(map(int, st["pending"]))}
