"""config["log_format"] = "json": laminardb's own records become one JSON object per line."""

from __future__ import annotations

import io
import json
import logging

import pytest

import laminardb
from laminardb.logs import configure


@pytest.fixture
def restore_laminardb_logger():
    root = logging.getLogger("laminardb")
    saved = (list(root.handlers), root.level, root.propagate)
    yield
    root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]


def test_json_format_from_config(restore_laminardb_logger):
    with laminardb.open(config={"log_format": "json"}):
        pass
    handlers = [h for h in logging.getLogger("laminardb").handlers if getattr(h, "_laminardb_handler", False)]
    assert len(handlers) == 1
    buf = io.StringIO()
    configure("json", stream=buf)
    logging.getLogger("laminardb.source").warning("source %s: broker unreachable", "k",
                                                  extra={"event": "source.down", "fields": {"source": "k"}})
    rec = json.loads(buf.getvalue().splitlines()[-1])
    assert rec["logger"] == "laminardb.source" and rec["event"] == "source.down" and rec["source"] == "k"
    assert rec["msg"] == "source k: broker unreachable" and rec["level"] == "WARNING"


def test_text_format_and_bad_format(restore_laminardb_logger):
    buf = io.StringIO()
    configure("text", stream=buf)
    logging.getLogger("laminardb.checkpoint.local").warning("checkpoint failed: %s", "disk full")
    assert "laminardb.checkpoint.local checkpoint failed: disk full" in buf.getvalue()
    with pytest.raises(laminardb.ConfigError) as e:
        laminardb.open(config={"log_format": "xml"})
    assert e.value.code == "LDB-9031"
