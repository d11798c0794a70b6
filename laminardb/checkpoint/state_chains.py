"""Incremental checkpoints: which state files each operator's last checkpoint is made of.

Why: an operator that can give its changes since the last snapshot (``op.incremental``: a
join, or a plan tree holding one) writes only those at most checkpoints, so the cost of a
checkpoint follows the rate of change, not the size of the state — Flink's changelog state
backend (FLIP-158) does the same. A checkpoint of such an operator is a *chain*: one whole
snapshot, then the deltas taken after it, oldest first. The chain's files live in
``checkpoints/state/`` (not in an epoch's directory), because several checkpoints share them;
each manifest names every file of its chains with size and CRC, so recovery verifies them
as it verifies its own files, and the store deletes a state file once no manifest names it.

A chain ends, and the next checkpoint writes a whole snapshot, when it holds ``max_deltas``
deltas or its deltas add up to more bytes than its whole snapshot (replay would then cost
more than a fresh one), when the operator cannot give a delta (its rows were renumbered by a
compaction), and after any failed or aborted checkpoint (its delta is lost with it). The
whole snapshot is encoded and written off the engine lock, like every snapshot file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STATE_DIR = "state"
#: how a manifest names a file of ``checkpoints/state/`` (relative to its epoch's directory)
STATE_PREFIX = f"../{STATE_DIR}/"
DEFAULT_MAX_DELTAS = 10


@dataclass
class Chain:
    """One operator's files in the last written checkpoint: the whole snapshot, then deltas."""

    op: Any
    files: list[str] = field(default_factory=list)
    meta: dict[str, dict[str, int]] = field(default_factory=dict)  # file → {"bytes", "crc"}
    #: file → the files the Delta mode's actors wrote beside it (``<file>.part-<actor>``)
    parts: dict[str, list[str]] = field(default_factory=dict)

    def with_parts(self, file: str) -> list[str]:
        return [file, *self.parts.get(file, [])]

    def _bytes(self, file: str) -> int:
        return sum(self.meta[f]["bytes"] for f in self.with_parts(file))

    @property
    def base_bytes(self) -> int:
        return self._bytes(self.files[0])

    @property
    def delta_bytes(self) -> int:
        return sum(self._bytes(f) for f in self.files[1:])


@dataclass
class Planned:
    """What a checkpoint writes for one operator: its new file, and the chain it extends."""

    node: str
    op: Any
    file: str
    delta: bool
    earlier: list[str]


class StateChains:
    """The chains of the last written checkpoint, per node name; see the module docstring."""

    def __init__(self, *, max_deltas: int = DEFAULT_MAX_DELTAS, enabled: bool = True) -> None:
        self.max_deltas = max_deltas
        self.enabled = enabled
        self._chains: dict[str, Chain] = {}
        self._planned: dict[int, list[Planned]] = {}  # epoch → its files, until written

    def take(self, epoch: int, node: str, index: int, op) -> tuple[str, Any, Planned]:
        """Under the barrier: the file name and image of ``op`` for checkpoint ``epoch``
        (a delta when its chain may grow, else a whole snapshot)."""
        chain = self._chains.get(node)
        image = None
        if chain is not None and chain.op is op and self._may_grow(chain):
            image = op.snapshot_delta()
        delta = image is not None
        if not delta:
            image = op.snapshot()
        name = f"{STATE_PREFIX}{epoch:012d}-op-{index}.{'delta' if delta else 'snap'}"
        earlier = list(chain.files) if delta and chain is not None else []
        planned = Planned(node, op, name, delta, earlier)
        self._planned.setdefault(epoch, []).append(planned)
        return name, image, planned

    def _may_grow(self, chain: Chain) -> bool:
        return (self.enabled and len(chain.files) - 1 < self.max_deltas
                and chain.delta_bytes <= chain.base_bytes)

    def earlier_files(self, epoch: int) -> dict[str, dict[str, int]]:
        """The files checkpoint ``epoch`` reuses from earlier ones (its manifest names them)."""
        out: dict[str, dict[str, int]] = {}
        for p in self._planned.get(epoch, []):
            for f in p.earlier:
                chain = self._chains[p.node]
                for part in chain.with_parts(f):
                    out[part] = chain.meta[part]
        return out

    def written(self, epoch: int, files: dict[str, dict[str, int]]) -> None:
        """Checkpoint ``epoch``'s files are on disk: its chains are the ones to extend."""
        for p in self._planned.pop(epoch, []):
            if p.delta:
                chain = self._chains[p.node]
            else:
                chain = self._chains[p.node] = Chain(p.op)
            chain.files.append(p.file)
            chain.meta[p.file] = files[p.file]
            parts = [f for f in files if f.startswith(f"{p.file}.part-")]
            if parts:
                chain.parts[p.file] = parts
                chain.meta.update((f, files[f]) for f in parts)

    def forget(self) -> None:
        """A checkpoint failed or was aborted: every operator writes a whole snapshot next."""
        self._chains.clear()
        self._planned.clear()
