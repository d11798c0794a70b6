"""A PySpark Python streaming data source over the rows ``e2e_spark.Feed`` serves on loopback
HTTP: ``spark.readStream.format("e2e").option("url", …)``. ``latestOffset`` asks how many rows
exist, ``read`` fetches a range: a micro-batch starts without listing any file.

Kept apart from ``e2e_spark`` so Spark's Python workers, which import it, import only the
standard library and pyspark.
"""

from __future__ import annotations

import json
import urllib.request

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

SPARK_SCHEMA = "id LONG, key STRING, ts LONG, created_ns LONG, v LONG"
_TIMEOUT_S = 30

class E2ESource(DataSource):
    """``format("e2e").option("url", …)``: the rows this bench's process holds, by offset."""

    @classmethod
    def name(cls) -> str:
        return "e2e"

    def schema(self) -> str:
        return SPARK_SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:  # noqa: N802 (pyspark's name)
        return _Reader(self.options["url"])


class _Reader(DataSourceStreamReader):
    def __init__(self, url: str) -> None:
        self.url = url

    def _get(self, path: str):
        with urllib.request.urlopen(self.url + path, timeout=_TIMEOUT_S) as r:
            return json.loads(r.read())

    def initialOffset(self) -> dict:  # noqa: N802
        return {"n": 0}

    def latestOffset(self, start: dict, limit) -> dict:  # noqa: N802
        return {"n": self._get("/latest")}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition((start["n"], end["n"]))]

    def read(self, partition: InputPartition):
        a, b = partition.value
        for r in self._get(f"/rows?start={a}&end={b}"):
            yield tuple(r)
