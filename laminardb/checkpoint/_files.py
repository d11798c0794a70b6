"""Durable file primitives every checkpoint writer shares: fsync a file and its directory,
write a file atomically (temp, fsync, rename, fsync dir), turn OS errors into typed ones."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from laminardb.checkpoint.exceptions import CheckpointWriteError


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or a new file in ``path`` survive a power loss."""
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_error(what: str, path: str | os.PathLike[str], exc: OSError) -> CheckpointWriteError:
    hint = ("the disk is full: free space or move the database directory"
            if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "check the directory's permissions and disk")
    return CheckpointWriteError(f"cannot write {what} {os.fspath(path)!r}: {exc.strerror or exc}; {hint}")


def atomic_write(path: str | os.PathLike[str], data: bytes, *, what: str = "file",
                 sync: bool = True) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the whole new one, never a part."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if sync:
            fsync_dir(path.parent)
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise write_error(what, path, exc) from exc


def write_with(path: str | os.PathLike[str], writer: Callable[[object], None], *, what: str) -> None:
    """Atomic write through a callback that writes to an open binary file object."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            writer(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_error(what, path, exc) from exc
