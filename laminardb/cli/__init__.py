"""The ``laminardb`` command: ``run``, ``shell``, ``demo``, ``cluster`` and the rest (``commands.py``)."""

from laminardb.cli.commands import main

__all__ = ["main"]
