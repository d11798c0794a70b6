"""Exactly-once FILE sink: a directory of part files, each made visible by an atomic rename
when the checkpoint that covers it commits. Entry point: :class:`TransactionalFileSink`.

``CREATE SINK s FROM stream INTO FILE (path = 'out', format = 'parquet')`` on a database
opened with ``laminardb.open(directory)`` builds one (an in-memory database keeps the
at-least-once single-file :class:`~laminardb.connectors.files.FileSink`). Layout of ``path``::

    part-000000000007-0-0000.parquet      committed output of epoch 7 (writer "0", file 0)
    _staging/part-000000000008-0-0000.parquet   sealed by pre_commit(8), waiting for commit(8)
    _staging/.inprogress-0-0000.parquet   rows of the open epoch, still being written

Readers that skip names starting with ``_`` or ``.`` (Spark, pyarrow.dataset, DuckDB and
Polars globs such as ``path/*.parquet``) see committed rows only, and a Parquet file is
complete (footer written) before it becomes visible. Like Flink's FileSink, commit is a
rename that is idempotent: a staged file that is gone while its target exists was committed.

A committed file of an epoch after the checkpoint recovery restored belongs to a checkpoint
that was skipped (its snapshot or manifest was damaged after the sink committed). No valid
manifest references it, and replay writes its rows again, so recovery moves it aside into
``_abandoned/`` (readers skip it; kept for inspection) — idempotently, like Flink's
FileCommitter settling a pending file. The database never reuses that epoch's number, so a
later epoch's names never meet it.

A write that fails (disk full) leaves nothing visible; the sink then refuses to pre-commit,
so no checkpoint covers the lost rows, and reopening the database rebuilds them from the
write-ahead log.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from laminardb.checkpoint._files import fsync_dir
from laminardb.checkpoint.sink import TwoPhaseSink
from laminardb.connectors._sinks import conform_to_sink
from laminardb.connectors.exceptions import SinkWriteError
from laminardb.connectors.files import FileSink, infer_format

__all__ = ["TransactionalFileSink"]

log = logging.getLogger(__name__)

# Rows per part file before the open epoch rolls to the next one: keeps a single Parquet
# footer (and a reader's unit of work) bounded when one epoch carries a burst of output.
_ROLL_ROWS = 1_000_000
_STAGING = "_staging"
_ABANDONED = "_abandoned"
_WRITER = re.compile(r"^[A-Za-z0-9_-]+$")


def _make_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents, each new entry made durable in its parent."""
    if path.is_dir():
        return
    _make_dirs(path.parent)
    path.mkdir(exist_ok=True)
    fsync_dir(path.parent)


def _hint(exc: BaseException) -> str:
    code = getattr(exc, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc):
        return "the disk is full: free space"
    return "check the directory's permissions and disk"


class TransactionalFileSink(TwoPhaseSink):
    """Writes a stream to part files in the directory ``path``, visible once committed.

    Args:
        path: the output directory (created if missing).
        format: ``"jsonl"``, ``"csv"`` or ``"parquet"`` (``None``: from the suffix of ``path``).
        schema: the schema of the stream the sink reads.
        writer: this writer's id in the file names, so that several writers (one per actor)
            can share one directory; letters, digits, ``_`` and ``-``.
        staging: where sealed and in-progress files wait (default ``path/_staging``); a
            partitioned sink keeps one staging tree for all its partition directories, and
            ``path`` is then created by the first commit.

    Raises:
        FileFormatError: the format is unknown.
        SinkWriteError: ``path`` cannot be created or is a file.
    """

    def __init__(self, path: str | os.PathLike[str], *, format: str | None,
                 schema: pa.Schema, writer: str = "0", staging: str | os.PathLike[str] | None = None) -> None:
        if not _WRITER.match(writer):
            raise ValueError(f"writer id {writer!r}: use letters, digits, '_' and '-'")
        self.path = Path(path).absolute()  # stays put when the process changes directory
        self.format = infer_format(self.path, format)
        self.schema = schema
        self.writer = writer
        self.staging = self.path / _STAGING if staging is None else Path(staging).absolute()
        self.rows_written = 0
        # metrics: rows in committed files, epochs committed; rows per sealed epoch until then
        self.rows_committed = 0
        self.epochs_committed = 0
        self._open_rows = 0
        self._sealed_rows: dict[int, int] = {}
        self._current: FileSink | None = None  # the in-progress file being written
        self._rolled: list[Path] = []  # closed in-progress files of the open epoch
        self._failed: str | None = None  # why the open epoch's rows were lost, until recover()
        self._staged_re = re.compile(
            rf"^part-(\d{{12}})-{re.escape(writer)}-(\d{{4}})\.{self.format}$")
        try:
            self.staging.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = (f"cannot create the sink directory {os.fspath(self.path)!r}: "
                   f"{exc.strerror or exc}; a transactional FILE sink writes part files into a "
                   "directory: choose a path that is a writable directory (or does not exist)")
            raise SinkWriteError(msg) from exc

    # ------------------------------------------------------------------ writing
    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add rows to the open epoch (an in-progress file under ``_staging/``).

        Raises:
            SinkSchemaError: the batch does not fit the sink's schema.
            SinkWriteError: the file cannot be written (the open epoch is then lost until
                the database is reopened; later rows are dropped, and rebuilt on reopen).
        """
        batch = conform_to_sink(batch, self.schema, f"sink {os.fspath(self.path)!r}")
        if self._failed is not None or batch.num_rows == 0:
            return  # failed: nothing can be committed before recover() rebuilds the epoch
        try:
            if self._current is None:
                self._current = FileSink(self._inprogress(len(self._rolled)), format=self.format,
                                         schema=self.schema)
            self._current.write(batch)
        except (OSError, pa.ArrowException) as exc:
            raise self._fail("write rows to", self._inprogress(len(self._rolled)), exc) from exc
        self.rows_written += batch.num_rows
        self._open_rows += batch.num_rows
        if self._current.rows_written >= _ROLL_ROWS:
            self._roll()

    def pre_commit(self, epoch: int) -> dict[str, Any]:
        """Seal the open epoch's files as ``epoch`` under ``_staging/`` (durably).

        Returns:
            ``{"files": [final names]}`` (empty when the epoch had no rows: no file).

        Raises:
            SinkWriteError: an earlier write failed, the files cannot be made durable, or
                ``path`` already holds a file of that name from another run.
        """
        if self._failed is not None:
            raise SinkWriteError(self._failed)
        if self._current is not None:
            self._roll()
        names = self._free_names(epoch, len(self._rolled))
        try:
            for src, name in zip(self._rolled, names, strict=True):
                os.replace(src, self.staging / name)
            if names:
                fsync_dir(self.staging)
        except OSError as exc:
            raise self._fail("stage", self.staging, exc) from exc
        # later writes belong to epoch + 1: start its file numbering afresh
        self._rolled = []
        if names:
            self._sealed_rows[epoch] = self._open_rows
        self._open_rows = 0
        return {"files": names}

    def _free_names(self, epoch: int, n: int) -> list[str]:
        """The names of ``epoch``'s ``n`` part files; raises SinkWriteError if ``path`` holds
        one already (another run's: committing would overwrite it)."""
        names = [self._name(epoch, i) for i in range(n)]
        for name in names:
            if (self.path / name).exists():
                msg = (f"sink {os.fspath(self.path)!r} already holds {name!r}, written by another "
                       "run: point the sink at a new directory or move the old part files away")
                raise SinkWriteError(msg)
        return names

    def adopt(self, epoch: int, files: list[str], rows: int) -> dict[str, Any]:
        """Stage ``epoch`` from part files written elsewhere (the Delta coordinator's Spark
        tasks), in row order: renamed to ``_staging/part-<epoch>-<writer>-<n>.<fmt>`` as
        ``pre_commit`` names them, so ``commit`` is the usual rename; returns what
        ``pre_commit`` returns.

        Raises:
            SinkWriteError: ``path`` already holds a file of that name (another run's), or a
                rename fails.
        """
        names = self._free_names(epoch, len(files))
        try:
            for src, name in zip(files, names, strict=True):
                os.replace(src, self.staging / name)
            fsync_dir(self.staging)
        except OSError as exc:
            raise SinkWriteError(f"cannot stage part files in {os.fspath(self.staging)!r}: {exc}; free space "
                                 "or fix the directory's permissions: the epoch is written again") from exc
        if names:
            self._sealed_rows[epoch] = rows
        return {"files": names}

    def commit(self, epoch: int) -> None:
        """Rename every staged file of epochs <= ``epoch`` into ``path``, oldest first.

        Idempotent: files already renamed are no longer staged, so a repeat does nothing.

        Raises:
            SinkWriteError: a rename failed (the file stays staged; commit again later).
        """
        staged = [s for s in self._staged() if s[0] <= epoch]
        if not staged:
            return
        try:
            _make_dirs(self.path)
            for _, _, name in staged:
                target = self.path / name
                if target.exists():  # a rename never leaves both: this is another run's file
                    msg = (f"cannot commit {name!r}: {os.fspath(self.path)!r} already holds a file "
                           "of that name from another run; move it away, then reopen the database")
                    raise SinkWriteError(msg)
                os.replace(self.staging / name, target)
            fsync_dir(self.path)
            fsync_dir(self.staging)
        except OSError as exc:
            if isinstance(exc, SinkWriteError):
                raise
            msg = (f"cannot commit sink files into {os.fspath(self.path)!r}: "
                   f"{exc.strerror or exc}; {_hint(exc)}: the staged files are kept and committed "
                   "at the next checkpoint or when the database is reopened")
            raise SinkWriteError(msg) from exc
        for e in sorted({e for e, _, _ in staged}):
            self.epochs_committed += 1
            self.rows_committed += self._sealed_rows.pop(e, 0)  # 0: staged before a restart

    def abort(self, epoch: int) -> None:
        """Delete the staged files of ``epoch``."""
        doomed = [name for e, _, name in self._staged() if e == epoch]
        self._unlink([self.staging / name for name in doomed])

    def recover(self, epoch: int, info: dict[str, Any] | None) -> None:
        """Settle after a restart from checkpoint ``epoch``: drop the unsealed files, commit
        staged epochs <= ``epoch``, abort later ones; the open epoch is ``epoch + 1``."""
        self._discard_open()
        self._failed = None
        for e in sorted({e for e, _, _ in self._staged() if e > epoch}):
            self.abort(e)
        self._set_aside_after(epoch)
        self.commit(epoch)
        staged = {name for _, _, name in self._staged()}
        for name in (info or {}).get("files", []):
            if name not in staged and not (self.path / name).exists():
                log.warning("sink %s: %s of checkpoint %d is gone (deleted by hand?)",
                            self.path, name, epoch)

    def highest_epoch(self) -> int:
        """The highest epoch of this writer's files: staged, committed or set aside."""
        best = 0
        for d in (self.staging, self.path, self.path / _ABANDONED):
            for e, _, _ in self._epoch_files(d):
                best = max(best, e)
        return best

    def flush(self) -> None:
        """Nothing to do: rows become visible when their checkpoint commits."""

    def close(self) -> None:
        """Drop the open epoch's in-progress files (replay rebuilds them); staged epochs stay
        for recovery. Idempotent."""
        self._discard_open()

    def _set_aside_after(self, epoch: int) -> None:
        """Move this writer's committed files of epochs after ``epoch`` into ``_abandoned/``
        (see the module docstring). A rename per file: a crash halfway leaves the rest for
        the next recovery, and a file already moved is not seen again."""
        doomed = [name for e, _, name in self._epoch_files(self.path) if e > epoch]
        if not doomed:
            return
        aside = self.path / _ABANDONED
        try:
            aside.mkdir(exist_ok=True)
            for name in doomed:
                target = aside / name
                n = 1
                while target.exists():  # the same name abandoned twice (not expected): keep both
                    target = aside / f"{name}.{n}"
                    n += 1
                os.replace(self.path / name, target)
            fsync_dir(aside)
            fsync_dir(self.path)
        except OSError as exc:
            msg = (f"sink {os.fspath(self.path)!r}: cannot move {len(doomed)} file(s) of a skipped "
                   f"checkpoint into {os.fspath(aside)!r}: {exc.strerror or exc}; {_hint(exc)}, then "
                   "open the database again (nothing was lost: their rows are rebuilt from the WAL)")
            raise SinkWriteError(msg) from exc
        log.warning("sink %s: %d file(s) of epochs after checkpoint %d belong to a skipped checkpoint; "
                    "moved into %s (their rows are written again from the WAL)",
                    self.path, len(doomed), epoch, aside)

    @property
    def idle(self) -> bool:
        """No row of the open epoch is held (nothing in progress)."""
        return self._current is None and not self._rolled and self._open_rows == 0

    def staged_files(self) -> list[str]:
        """Names of this writer's sealed files not committed yet, oldest first."""
        return [name for _, _, name in self._staged()]

    # ------------------------------------------------------------------ internals
    def _name(self, epoch: int, n: int) -> str:
        return f"part-{epoch:012d}-{self.writer}-{n:04d}.{self.format}"

    def _inprogress(self, n: int) -> Path:
        return self.staging / f".inprogress-{self.writer}-{n:04d}.{self.format}"

    def _staged(self) -> list[tuple[int, int, str]]:
        """This writer's sealed files as (epoch, n, name), oldest first."""
        return self._epoch_files(self.staging)

    def _epoch_files(self, directory: Path) -> list[tuple[int, int, str]]:
        """This writer's part files in ``directory`` as (epoch, n, name), oldest first."""
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for name in names:
            m = self._staged_re.match(name)
            if m:
                out.append((int(m.group(1)), int(m.group(2)), name))
        return sorted(out)

    def _roll(self) -> None:
        """Close the current in-progress file (Parquet footer) and make its bytes durable."""
        current, self._current = self._current, None
        assert current is not None
        try:
            current.close()
            fd = os.open(current.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except (OSError, pa.ArrowException) as exc:
            raise self._fail("finish", current.path, exc) from exc
        self._rolled.append(Path(current.path))

    def _fail(self, what: str, path: str | os.PathLike[str], exc: BaseException) -> SinkWriteError:
        """Give up the open epoch: delete its files, remember why, build the error."""
        cause = exc.__cause__ if isinstance(exc, SinkWriteError) and exc.__cause__ else exc
        self._failed = (
            f"sink {os.fspath(self.path)!r} could not {what} {os.fspath(path)!r}: {cause}; "
            f"{_hint(cause)}, then reopen the database: its output since the last checkpoint is "
            "rebuilt from the write-ahead log (nothing partial was made visible)")
        self._discard_open()
        return SinkWriteError(self._failed)

    def _discard_open(self) -> None:
        current, self._current = self._current, None
        if current is not None:
            try:
                current.close()
            except (OSError, pa.ArrowException):
                pass  # the file is deleted below anyway
        self._rolled = []
        try:
            names = os.listdir(self.staging)
        except FileNotFoundError:
            return
        prefix = f".inprogress-{self.writer}-"
        self._unlink([self.staging / n for n in names if n.startswith(prefix)], truncate=True)

    def _unlink(self, paths: list[Path], *, truncate: bool = False) -> None:
        if not paths:
            return
        for p in paths:
            if truncate:
                # free the space now, even while a failed writer (kept alive by its
                # exception's traceback) still holds the file open
                try:
                    os.truncate(p, 0)
                except OSError:
                    pass
            p.unlink(missing_ok=True)
        try:
            fsync_dir(self.staging)
        except OSError:
            pass  # a deletion that does not survive a crash is redone by recover()
