"""One lock file shared by the pytest-xdist workers: Ray instances on both, never beside ``ray up``.

``make test`` runs Ray tests on both workers: the long ``ray`` unit on one, and the modules
that start a Ray of their own for the module (``tests/conftest.py``, ``_RAY_BESIDE``) inside
the ``services`` unit on the other. Each worker has its own ``RAY_TMPDIR``, so neither finds
the other's cluster. The one test that cannot share the machine is ``tests/cluster/test_ray_up.py``:
``ray up`` and ``ray down`` run ``ray stop``, which kills every Ray on it. That test holds the
lock exclusively; each module beside it holds it shared while its Ray runs.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_PATH = Path(tempfile.gettempdir()) / "laminardb-tests-ray.lock"
# Taken exclusively in turn before the lock itself, so that a waiting exclusive holder goes
# before shared ones that come after it (the services unit takes the lock module after module).
_GATE_PATH = Path(tempfile.gettempdir()) / "laminardb-tests-ray.gate"
# ray up's test takes about 1.5 minutes; a module of the services unit about half of one.
_WAIT_S = 600.0


@contextmanager
def ray_lock(*, exclusive: bool, wait_s: float = _WAIT_S) -> Iterator[None]:
    """Hold the lock (shared or exclusive) for the block; TimeoutError after ``wait_s``."""
    end = time.monotonic() + wait_s
    kind = "exclusive" if exclusive else "shared"
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with _held(_GATE_PATH, end, kind):
            _flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, end, kind)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def _held(path: Path, end: float, kind: str) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        _flock(fd, fcntl.LOCK_EX, end, kind)
        yield
    finally:
        os.close(fd)  # releases the flock


def _flock(fd: int, mode: int, end: float, kind: str) -> None:
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= end:
                raise TimeoutError(f"no {kind} hold on {LOCK_PATH} in time: another pytest worker "
                                   "kept it (tests/_services/ray_lock.py)") from None
            time.sleep(0.1)
