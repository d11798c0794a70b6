"""A small real filesystem for disk-full tests: a tmpfs the kernel fills with a true ENOSPC.

Entry point: ``tiny_tmpfs(parent, size)`` — a context manager yielding the mount point, or
skipping the test (with the reason) where mounting is not permitted (it needs root).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tiny_tmpfs(parent: Path, size: str = "1m") -> Iterator[Path]:
    mnt = parent / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                       capture_output=True, text=True, timeout=30)
    if r.returncode:
        pytest.skip(f"cannot mount a {size} tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)
