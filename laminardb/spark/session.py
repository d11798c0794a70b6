"""A SparkSession on the standalone cluster of ``standalone.py``, with its secret kept off
every command line.

Why not ``SparkSession.builder.config(...)``: pyspark starts the driver's JVM through
``spark-submit`` with every setting as a ``--conf`` argument, which any local user can read
in ``/proc/<pid>/cmdline``. Here the JVM starts with the public settings only; the secret is
then set through the Py4J gateway when the SparkContext is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_SECRET = "spark.authenticate.secret"


def standalone_session(conf: dict[str, str], *, app_name: str) -> Any:
    """A SparkSession with ``conf`` (from ``standalone.coordinator_conf``) and the secret
    read from ``spark.authenticate.secret.file``."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    settings = dict(conf)
    secret = Path(settings.pop("spark.authenticate.secret.file")).read_text().strip()
    public = SparkConf(loadDefaults=False).setAll(list(settings.items())).setAppName(app_name)
    gateway = launch_gateway(public)
    full = SparkConf(loadDefaults=False).setAll(list(settings.items())).setAppName(app_name)
    full.set(_SECRET, secret)
    sc = SparkContext(conf=full, gateway=gateway)
    return SparkSession(sc)
