"""``ReactorActor``: one Ray actor per core running the embedded engine over its vnodes.

Entry point: ``actor_class()`` returns the Ray actor class (Ray is imported lazily so the
embedded mode never needs it). The actor installs the same DDL as the client and runs the
operators of each query over the rows it owns; the client (``DistributedOperator``)
drives watermarks, so every actor judges lateness and closes windows exactly as the
embedded engine would. Batches arrive and leave as Arrow IPC bytes.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa

from laminardb.checkpoint.actor_stages import ActorStages
from laminardb.cluster.routing import range_slice, route_rows
from laminardb.cluster.shm_ring import ShmReader, ShmSlice
from laminardb.cluster.wire import from_ipc, resolved, to_ipc, to_ipc_array, to_ipc_table
from laminardb.sql.expressions import evaluate_mask


class ReactorActorImpl:
    """The actor's body (wrapped by ``ray.remote`` in ``actor_class``)."""

    def __init__(self, index: int, n_actors: int) -> None:
        self.index = index
        self.n_actors = n_actors
        self.core = None
        if hasattr(os, "sched_setaffinity"):
            cores = sorted(os.sched_getaffinity(0))
            self.core = cores[index % len(cores)]
            os.sched_setaffinity(0, {self.core})  # one reactor per core: no migrations, warm caches
        import laminardb

        self.conn = laminardb.open()  # also compiles/loads the numba kernels before any query
        self.conn.engine.reactor.connectors_enabled = False  # the client polls connector sources
        self.owner = np.zeros(0, dtype=np.int64)  # vnode → actor index
        self.owned = np.zeros(0, dtype=np.bool_)
        self.rows_in = 0
        self.busy_s = 0.0  # seconds spent running batches and watermarks (utilisation)
        self.cpu_s = 0.0  # of which on the CPU (busy_s − cpu_s: waiting for a core)
        self.polled_rows = 0  # Kafka records this actor read (the autoscaler's processed rows)
        self.poll_cpu_s = 0.0  # CPU seconds of fetching and decoding them (busy, for the autoscaler)
        self.kafka: dict = {}  # source → the connector this actor reads (Kafka partitions, a CDC log)
        #: source → the lock its connector is used under: polls run on threads of their own
        #: (concurrency group ``sources``), start/stop/lag on the main one
        self._source_locks: dict[str, threading.Lock] = {}
        self._counters = threading.Lock()  # the counters below the polls' threads add to
        self.changelog_seen: dict = {}  # source → (monotonic, its last changelog_metrics())
        self.partial: dict = {}  # node → PartialState (unkeyed aggregates)
        self.shm = ShmReader()  # batches the client wrote into shared memory (same machine)
        self.images: dict = {}  # node → StateImage taken at the last barrier, until encoded
        self.kept: dict = {}  # query → a plan tree's rows this actor routed to itself, until its next step
        self.insert_log = None  # direct_insert.ActorInsertLog: rows clients inserted through this actor
        self.insert_log_dir: str | None = None
        self.stages = ActorStages()  # sink rows this actor staged itself (checkpoint/actor_stages.py)

    def reset(self) -> None:
        """Forget every query and all state (a pooled actor serving a new connection)."""
        import laminardb

        for name in list(self.kafka):
            self.stop_kafka(name)
        self.conn.close()
        self.shm.close()
        self.partial = {}
        self.images = {}
        self.kept = {}
        if self.insert_log is not None:
            self.insert_log.close()
        self.insert_log, self.insert_log_dir = None, None
        self.stages.close()
        self.conn = laminardb.open()
        self.conn.engine.reactor.connectors_enabled = False
        self.rows_in = self.polled_rows = 0
        self.busy_s = self.cpu_s = self.poll_cpu_s = 0.0

    def ready(self) -> dict:
        import ray

        return {"index": self.index, "pid": os.getpid(), "core": self.core,
                "node_id": ray.get_runtime_context().get_node_id()}

    def heartbeat(self) -> None:
        """Answered on its own thread (concurrency group ``liveness``, see ``actor_class``),
        even while a long batch runs: only a process that runs nothing (paused, hung, cut
        off) stays silent — ``liveness.Heartbeats`` tells it from a busy one."""

    heartbeat.__ray_concurrency_group__ = "liveness"  # what @ray.method(concurrency_group=…) sets

    def set_ownership(self, owner: bytes, epochs: bytes, n_actors: int | None = None) -> None:
        """The owner of every vnode (this actor routes the rows it reads itself), the
        committed epochs (the fencing tokens of the vnodes it owns) and, after a rescale, how
        many actors there are now (row ranges are shares of that many)."""
        if n_actors is not None:
            self.n_actors = n_actors
        self.owner = np.frombuffer(owner, dtype=np.int64).copy()
        self.owned = self.owner == self.index
        self.epochs = np.frombuffer(epochs, dtype=np.int64).copy()

    def execute(self, sql: str, udfs: list[dict] | None = None) -> None:
        """Install DDL the client planned first. ``udfs``: the client's Python UDFs as
        ``UdfRegistry.describe()`` gives them (importable ``"module:qualname"`` references,
        never function objects), registered here before the statement is planned."""
        if udfs:
            self._register_udfs(udfs)
        self.conn.execute(sql)

    def _register_udfs(self, udfs: list[dict]) -> None:
        """Import and register the client's UDFs this actor does not have in that form yet (a
        name registered again on the client with another function is replaced here too)."""
        from laminardb.sql.udf import UdfRegistry

        reg = self.conn.engine.udfs
        fresh = [u for u in udfs if (have := reg.get(str(u["name"]))) is None
                 or have.reference() != u.get("function") or _type_text(have.return_type) != u.get("return_type")]
        try:
            imported = UdfRegistry.from_description(fresh)
        except (ImportError, AttributeError) as e:
            from laminardb.sql.exceptions import UdfDefinitionError

            refs = ", ".join(str(u.get("function")) for u in fresh)
            raise UdfDefinitionError(f"a reactor actor (pid {os.getpid()}) cannot import the UDFs {refs}: {e}; "
                                     "install their module on every node of the cluster") from e
        for udf in imported._functions.values():
            reg.register(udf.name, udf.fn, udf.return_type)

    def _op(self, node: str):
        return self.conn.engine.reactor.nodes[node].op

    def _rows(self, mode: str, data: tuple) -> pa.RecordBatch | None:
        """The rows this call works on: ``range`` — this actor's contiguous share of one
        batch; ``all``/``routed`` — every batch passed, concatenated (None: no rows)."""
        batches = [self.shm.read(d) if isinstance(d, ShmSlice) else from_ipc(resolved(d)) for d in data]
        if not batches:
            return None
        if mode == "range":
            (batch,) = batches
            start, end = range_slice(batch.num_rows, self.index, self.n_actors)
            return batch.slice(start, end - start)
        if len(batches) == 1:
            return batches[0]
        return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]

    def process(self, node: str, wm_before: int, mode: str, wm_next: int | None,
                *data, rows_back: bool = False) -> tuple[list[bytes], bytes | None, list[bytes]] | tuple:
        """Run rows through a query (``mode`` and ``data`` as in ``_rows``; ``routed`` rows
        are already filtered by WHERE and all belong to vnodes this actor owns); with
        ``wm_next`` also advance the watermark — the windows it closes come back third.
        ``rows_back``: the output and closed rows come back as a second return value of their
        own (the head calls with ``num_returns=2`` and hands it to its subscribers by
        reference): ((output rows, late rows as IPC, closed rows), their IPC)."""
        with self._busy():  # encoding the rows is busy work too
            outs, late, closed = self._process(node, wm_before, mode, wm_next, data)
            if rows_back:
                return _rows_meta(outs, late, closed), _rows_ipc(outs + closed)
            return [to_ipc(b) for b in outs], _late_ipc(late), [to_ipc(b) for b in closed]

    def _process(self, node: str, wm_before: int, mode: str, wm_next: int | None, data) -> tuple:
        op = self._op(node)
        outs, late = [], None
        batch = self._rows(mode, data)
        if batch is not None:
            self.rows_in += batch.num_rows
            outs, late = op.process(batch, wm_before, skip_where=(mode == "routed"))
        closed = op.on_watermark(wm_next) if wm_next is not None else []
        return outs, late, closed

    @contextmanager
    def _busy(self) -> Iterator[None]:
        """Count the wall and CPU seconds of running batches (``metrics()``: utilisation)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            with self._counters:
                self.busy_s += time.perf_counter() - t0
                self.cpu_s += time.thread_time() - c0

    def can_read_shm(self, path: str) -> bool:
        return self.shm.can_read(path)

    def process_many(self, method: str, node: str, items: list[tuple], rows_back: bool = False,
                     merges: list | None = None) -> list | tuple:
        """Several batches in one call (sent while this actor was busy), run one by one
        exactly as separate ``process``/``process_partial`` calls would. ``rows_back``
        (``process`` only): (each batch's metadata, every batch's rows in one IPC stream, in
        order), as ``process`` says. ``merges``: as ``process_partial`` says."""
        if merges:
            done = self.merge_many(node, merges)
            return self.process_many(method, node, items, rows_back), done
        if rows_back:
            metas, batches = [], []
            with self._busy():
                for wm_before, mode, wm_next, data in items:
                    outs, late, closed = self._process(node, wm_before, mode, wm_next, [] if data is None else [data])
                    metas.append(_rows_meta(outs, late, closed))
                    batches += outs + closed
                return metas, _rows_ipc(batches)
        run = getattr(self, method)
        return [run(node, wm_before, mode, wm_next, *([] if data is None else [data]))
                for wm_before, mode, wm_next, data in items]

    def process_partial(self, node: str, wm_before: int, mode: str, wm_next: int | None,
                        *data, merges: list | None = None) -> tuple:
        """Unkeyed aggregate: fold rows in (``mode``/``data`` as in ``_rows``); return late
        rows, the partials of the groups touched and (with ``wm_next``) of the windows that
        closes. ``merges``: earlier closes' partials this actor owns, which the head folded
        into this call instead of calling ``merge_closed`` for each (``owner_merge.py``):
        merged and staged first; the answer is then (that answer, (partial rows merged, rows
        staged))."""
        if merges:
            done = self.merge_many(node, merges)
            return self.process_partial(node, wm_before, mode, wm_next, *data), done
        from laminardb.cluster.partial import PartialState
        from laminardb.sql.arrays import numeric_view

        with self._busy():
            op = self._op(node)
            state = self.partial.get(node)
            if state is None:
                state = self.partial[node] = PartialState(op.plan)
            batch = self._rows(mode, data)
            if batch is None:
                batch = pa.RecordBatch.from_pylist([], schema=self.conn.engine.reactor.nodes[op.plan.input].schema)
            if op.plan.where is not None and batch.num_rows:
                batch = batch.filter(pa.array(evaluate_mask(op.plan.where, batch)))
            self.rows_in += batch.num_rows
            idx = op.plan.aggregate.time_index
            late, touched = state.run(batch, wm_before,
                                      lambda b: numeric_view(b.column(idx)) if idx is not None else None)
            closed = self._closed_partials(state, wm_next) if wm_next is not None else None
            return ((to_ipc(late) if late is not None and late.num_rows else None),
                    (to_ipc(touched) if touched is not None else None), closed)

    def close_partial(self, node: str, wm: int):
        from laminardb.cluster.partial import PartialState

        state = self.partial.get(node)
        if state is None:
            state = self.partial[node] = PartialState(self._op(node).plan)
        return self._closed_partials(state, wm)

    def _closed_partials(self, state, wm: int):
        """The partials of the windows ``wm`` closes: keyed (local-global) — cut by the
        owner of each key's vnode, as (owner, payload) pairs for ``merge_closed`` on those
        owners; unkeyed — one IPC batch, which the head merges (one group per window)."""
        from laminardb.cluster.owner_merge import split_closed

        closed = state.close(wm)
        keys = len(state.plan.aggregate.keys)
        if not keys:
            return to_ipc(closed)
        return split_closed(closed, keys, self.owner, self.n_actors)

    def merge_closed(self, node: str, stage: tuple[str, bytes] | None,
                     *payloads, rows_back: bool = False) -> tuple[int, list[tuple[int, bytes]], int] | tuple:
        """Local-global's global phase: the closed partials of the keys this actor owns,
        from every actor, merged and finished here (``owner_merge.py``). Returns (partial
        rows merged, the final rows as (window start, IPC), rows staged): with ``stage``
        (this actor's stage directory for the query's only sink, and the sink's schema) the
        final rows go to this actor's stage file for that sink instead
        (``checkpoint/actor_stages.py``). ``rows_back``: the final rows (also) come back as a
        second return value, for the head's subscribers by reference: ((merged, [(window
        start, rows)], staged), their IPC, window after window)."""
        from laminardb.cluster.owner_merge import merge_closed

        with self._busy():
            op = self._op(node)
            merged, windows = merge_closed(op.plan, op, list(payloads))
            staged = self.stages.append(*stage, [b for _, b in windows]) if stage is not None else 0
            if rows_back:
                return ((merged, [(ws, b.num_rows) for ws, b in windows], staged),
                        _rows_ipc([b for _, b in windows]))
            if stage is None:
                return merged, [(ws, to_ipc(b)) for ws, b in windows], 0
            return merged, [], staged

    def merge_many(self, node: str, merges: list) -> tuple[int, int]:
        """``merge_closed`` for each (stage, payloads) the head folded into a batch's call,
        in close order: (partial rows merged, rows staged). Parts sent as object references
        are nested in ``merges``, so Ray did not fetch them: fetched here in one call."""
        import ray

        refs = [p for _, payloads in merges for p in payloads if isinstance(p, ray.ObjectRef)]
        fetched = dict(zip(refs, ray.get(refs), strict=True)) if refs else {}
        merged = staged = 0
        for stage, payloads in merges:
            n, _, s = self.merge_closed(node, stage, *(fetched.get(p, p) if isinstance(p, ray.ObjectRef) else p
                                                       for p in payloads))
            merged, staged = merged + n, staged + s
        return merged, staged

    def seal_stage(self, directory: str, epoch: int) -> tuple[str, int] | None:
        """The barrier of checkpoint ``epoch`` for the sink rows staged in ``directory``."""
        return self.stages.seal(directory, epoch)

    # -- plan trees: each actor runs the whole tree over its rows (exchange.py) --------
    def plan_input(self, query: str, name: str, wm: int, mode: str, data,
                   stage: tuple[str, bytes] | None = None, rows_back: bool = False):
        """Rows of input ``name`` into this actor's copy of ``query``'s tree: ``range`` — its
        contiguous share of a batch the client inserted; ``refs`` — the object references of
        the Kafka rows it read itself. Returns (messages for other actors — references to rows
        it put in the object store, and its own parts kept here — the root's output as IPC,
        rows dropped as late, rows staged). With ``stage`` (this actor's stage directory for the
        query's only sink, and the sink's schema) the root's output goes to this actor's stage
        file for that sink instead of back to the head (``checkpoint/actor_stages.py``); with
        ``rows_back`` too, as ``_answer`` says."""
        import ray

        with self._busy():
            if mode == "range":
                # copied out of the shared-memory ring: joins and Top-N keep input rows as state
                batch = self.shm.read(data, copy=True) if isinstance(data, ShmSlice) else from_ipc(resolved(data))
                start, end = range_slice(batch.num_rows, self.index, self.n_actors)
                batches = [batch.slice(start, end - start)]
            else:
                batches = [from_ipc(d) for d in ray.get(list(data))]
            ex = self._exchange(query, first=True)
            for batch in batches:
                self.rows_in += batch.num_rows
                ex.enter(name, batch, wm)
            return self._answer(ex, stage, rows_back)

    def plan_deliver(self, query: str, wm: int, messages: list,
                     stage: tuple[str, bytes] | None = None, rows_back: bool = False):
        """Rows other actors (and this one) routed here, as (node, port, payload): run them
        on up the tree; returns as ``plan_input``."""
        with self._busy():
            ex = self._exchange(query)
            self.rows_in += ex.deliver(messages, wm)
            return self._answer(ex, stage, rows_back)

    def plan_watermark(self, query: str, index: int | None, wm: int, before: int,
                       stage: tuple[str, bytes] | None = None, rows_back: bool = False):
        """Node ``index`` (None: every stateful node, children first — one actor) advances to
        ``wm``; what it closes moves on up at ``before``. Returns as ``plan_input``."""
        from laminardb.cluster.exchange import stateful_nodes

        with self._busy():
            ex = self._exchange(query, first=True)
            indexes = [i for i, _ in stateful_nodes(ex.tree)] if index is None else [index]
            for i in indexes:
                ex.watermark(i, wm, before)
            return self._answer(ex, stage, rows_back)

    def _answer(self, ex, stage: tuple[str, bytes] | None, rows_back: bool = False):
        """(messages, the root's rows as IPC, rows dropped as late, rows staged). With
        ``stage`` the root's rows go to the stage file of the query's only sink. ``rows_back``:
        the root's rows are (also) kept for the subscribers as a second return value (the head
        calls with ``num_returns=2``), which the head hands on by reference: ((messages, root
        row count, late, staged), IPC or None)."""
        sent, outs, late = ex.result()
        data = _rows_ipc(outs) if stage is None or rows_back else None
        staged = self.stages.append(*stage, outs) if stage is not None else 0
        if rows_back:
            return (sent, sum(b.num_rows for b in outs), late, staged), data
        return sent, None if stage is not None else data, late, staged

    def _exchange(self, query: str, *, first: bool = False):
        """``first``: the call starts a batch's or a watermark's propagation — parts kept from
        one that failed midway (an actor died) are dropped."""
        from laminardb.cluster.exchange import ActorExchange

        if first or query not in self.kept:
            self.kept[query] = {}
        return ActorExchange(self._op(query), self.index, self.owner, self.n_actors, self.kept[query])

    def plan_state(self, query: str) -> tuple[int, int]:
        from laminardb.cluster.distributed_plan import tree_state

        return tree_state(self._op(query))

    def on_watermark(self, node: str, wm: int, rows_back: bool = False) -> list[bytes] | tuple:
        """The rows ``wm`` closes; ``rows_back``: ((0, None, their count), their IPC), as
        ``process`` answers."""
        closed = self._op(node).on_watermark(wm)
        if rows_back:
            return _rows_meta([], None, closed), _rows_ipc(closed)
        return [to_ipc(b) for b in closed]

    def current_rows(self, node: str) -> bytes:
        return to_ipc(self._op(node).current_rows())

    # -- checkpoints: the head calls these in its barrier (see distributed.py) -------
    def snapshot_take(self, nodes: list[str], partial: bool = False, delta: bool = False) -> None:
        """Copy the state of ``nodes`` (the barrier: Ray runs this after every batch the head
        sent before it); ``snapshot_encode`` turns the copies into bytes off the barrier.
        ``partial``: the nodes run as partial aggregates here — also those no row reached yet,
        whose (empty) partial state must snapshot in the partial form. ``delta``: only the
        changes since the last snapshot, where the query can give them (``state_chains``)."""
        from laminardb.cluster.partial import PartialState

        for node in nodes:
            state = self.partial.get(node)
            if state is None and partial:
                state = self.partial[node] = PartialState(self._op(node).plan)
            if state is not None:
                self.images[node] = state.agg.snapshot()
            elif node in self.conn.engine.reactor.nodes:
                op = self._op(node)
                self.images[node] = op.snapshot_delta() if delta and op.incremental else op.snapshot()

    def snapshot_encode(self, node: str) -> bytes | None:
        image = self.images.pop(node, None)
        return None if image is None else image.encode()

    def snapshot_write(self, node: str, path: str) -> dict[str, int] | None:
        """Write this actor's copy of ``node``'s state (``snapshot_take``) as the checkpoint
        file ``path``; returns its manifest entry (size, CRC), or None when it has none."""
        from laminardb.checkpoint.store import write_snapshot

        image = self.images.pop(node, None)
        if image is None:
            return None
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return write_snapshot(path, image.encode())

    def restore_state(self, node: str, blobs: list, partial: bool, vnodes: list[int] | None) -> None:
        """Load checkpointed parts into the (freshly created) query ``node``: only the groups
        of ``vnodes`` when given (the vnodes this actor owns now); the parts add up."""
        if partial:
            from laminardb.cluster.partial import PartialState

            self.partial[node] = PartialState(self._op(node).plan)
        loaded = 0
        for blob in map(_part_bytes, blobs):
            if blob is None:
                continue
            if partial:  # several parts (a scale-in) add up per (window, key)
                self.partial[node].agg.restore(blob, vnodes=vnodes, add=loaded > 0)
                loaded += 1
            else:
                self._op(node).restore(blob, vnodes=vnodes)

    def restore_chain(self, node: str, pieces: list[list], vnodes: list[int] | None) -> None:
        """Load a chain of checkpoints of a plan tree: ``pieces[k][s]`` is what actor ``s``
        wrote at the k-th checkpoint of the chain (a whole snapshot first, then deltas). Each
        writer's chain is replayed on its own, keeping the rows of ``vnodes``; they add up."""
        op = self._op(node)
        for s in range(max(len(p) for p in pieces)):
            chain = [_part_bytes(p[s]) for p in pieces if s < len(p) and p[s] is not None]
            if chain:
                op.restore_chain(chain, vnodes=vnodes)

    # -- Kafka partitions this actor owns (see kafka_ingest.py) ----------------------
    def start_kafka_all(self, source: str, options_json: str, assignment_json: str,
                        restore_json: str | None = None) -> None:
        """Read this actor's partitions; ``restore_json``: a checkpointed position (offsets and
        watermark states of every partition of the source) to resume from."""
        import json

        from laminardb.connectors.kafka import KafkaSource

        partitions = json.loads(assignment_json).get(str(self.index), [])
        node = self.conn.engine.reactor.nodes[source]
        extra = {} if restore_json is None else {"restore_state": json.loads(restore_json)}
        src = KafkaSource(
            name=source, schema=node.schema, options=json.loads(options_json),
            time_col=node.time_col, delay_ticks=node.delay_ticks, partitions=partitions, **extra,
        )
        with self._source_lock(source):
            self.kafka[source] = src

    def _source_lock(self, source: str) -> threading.Lock:
        """The lock ``source`` 's connector is used under: a consumer is not thread-safe, and a
        poll (on a ``sources`` thread) may meet a stop, a lag read or a restart."""
        lock = self._source_locks.get(source)
        return lock if lock is not None else self._source_locks.setdefault(source, threading.Lock())

    def poll_kafka(self, source: str, timeout_ms: int, routed_queries: list[str]) -> tuple[dict, dict, dict]:
        """Read this actor's partitions. The rows stay here, in Ray's object store: once
        whole, and for each keyed query in ``routed_queries`` split by owner (WHERE applied),
        so the owners fetch their parts from this actor directly. Returns (that description
        with the row count and max event time, the per-partition watermark states, the
        position right after this poll — what a checkpoint taken after these rows keeps).
        The description's ``failing`` is ``KafkaSource.fetch_failure()``: (seconds, reason)
        while this actor's fetches keep failing, else None; ``warnings`` the messages of its
        ``take_warnings()`` (offset resets)."""
        with self._source_lock(source):
            src = self.kafka[source]
            batch, _ = self._timed_poll(src, timeout_ms)
            states = src.partition_watermarks()
            position = src.checkpoint_state()
            # what the embedded engine's metrics read off its own consumer: lag from the last fetch
            # responses (no broker request), messages dead-lettered, decoded bytes
            health = {"lag": {str(p): n for p, n in src.partition_lag().items()},
                      "dead_lettered": src.dead_lettered, "dead_letter_failures": src.dead_letter_failures,
                      "failing": src.fetch_failure(),  # the broker unreachable: fetches retried quietly meanwhile
                      "warnings": [w.message for w in src.take_warnings()]}  # offset resets, shown by the head's runner
        return self._keep_rows(source, batch, routed_queries, health), states, position

    # a poll waits up to timeout_ms for records: on a thread of its own, so a source with
    # nothing to read never holds up the batches, steps and polls of the others on this actor
    poll_kafka.__ray_concurrency_group__ = "sources"

    def _timed_poll(self, src, timeout_ms: int):
        """``src.poll(timeout_ms)``, its CPU seconds added to ``poll_cpu_s`` (CPU only: a poll
        that waits for records is not busy)."""
        c0 = time.thread_time()
        out = src.poll(timeout_ms)
        with self._counters:
            self.poll_cpu_s += time.thread_time() - c0
        return out

    def _keep_rows(self, source: str, batch: pa.RecordBatch | None, routed_queries: list[str],
                   health: dict, *, whole: bytes | None = None, read: bool = True) -> dict:
        """Rows this actor read stay here, in Ray's object store: once whole, and for each keyed
        query in ``routed_queries`` split by owner (WHERE applied), so the owners fetch their
        parts from this actor directly. Returns their description (``remote_rows.RemoteRows``).
        ``whole``: the batch's IPC when the caller has it; ``read``: rows this actor read from a
        connector (the autoscaler's processed rows), not rows a client inserted."""
        import ray

        from laminardb.sql.arrays import numeric_view

        if batch is None or batch.num_rows == 0:
            return {"rows": 0, "bytes": 0, **health}
        if read:
            with self._counters:
                self.polled_rows += batch.num_rows
        with self._busy():
            time_col = self.conn.engine.reactor.nodes[source].time_col
            top = int(numeric_view(batch.column(time_col)).max()) if time_col is not None else None
            routed = {}
            for query in routed_queries:
                parts = route_rows(self._op(query).plan, batch, self.owner, self.n_actors)
                routed[query] = [ray.put(to_ipc_array(p)) if p.num_rows else None for p in parts]
            return {"rows": batch.num_rows, "bytes": batch.nbytes, "max_event_time": top,
                    "whole": ray.put(to_ipc_array(batch) if whole is None else whole), "routed": routed, **health}

    # -- rows a client inserted through this actor (direct_insert.py) ---------------------
    def open_insert_log(self, directory: str | None, sync: str) -> None:
        """Log inserted rows in ``directory`` (None: a database without files logs nothing)."""
        from laminardb.cluster.direct_insert import ActorInsertLog

        if directory == self.insert_log_dir and (directory is None or self.insert_log is not None):
            return  # a restarted head adopting this actor: the log is open already
        if self.insert_log is not None:
            self.insert_log.close()
        self.insert_log = ActorInsertLog(directory, sync) if directory is not None else None
        self.insert_log_dir = directory

    def stage_insert(self, source: str, payload: dict, routed_queries: list[str]) -> dict:
        """Convert, log and keep one client insert here (``direct_insert.stage``)."""
        from laminardb.cluster.direct_insert import stage

        return stage(self, source, payload, routed_queries)

    # -- a source one actor reads (a CDC source, see actor_source.py) -----------------
    def start_source(self, source: str, kind: str, options_json: str,
                     restore_json: str | None = None) -> None:
        """Build and read the polled connector of ``source`` here, as the embedded engine
        would (``restore_json``: its checkpointed position)."""
        import json

        node = self.conn.engine.reactor.nodes[source]
        make = self.conn.engine.reactor.make_source_connector
        extra = () if restore_json is None else (json.loads(restore_json),)
        src = make(kind, node, json.loads(options_json), *extra)
        with self._source_lock(source):
            self.kafka[source] = src

    def poll_source(self, source: str, timeout_ms: int, routed_queries: list[str]) -> tuple[dict, dict]:
        """One poll of a source read here: (the rows kept here, as ``poll_kafka`` keeps them,
        with the connector's health; its position right after this poll)."""
        from laminardb.connectors.polled import FROM_DATA

        with self._source_lock(source):
            src = self.kafka[source]
            batch, wm = self._timed_poll(src, timeout_ms)
            take = getattr(src, "take_warnings", None)
            mark = "data" if wm is FROM_DATA else (wm if isinstance(wm, int) else None)
            health = {"failing": src.fetch_failure(), "lag": src.lag(), "watermark": mark,
                      "changelog": self._changelog_metrics(source, src),
                      "warnings": [(getattr(w, "code", None), getattr(w, "message", str(w)))
                                   for w in (take() if take else ())]}
            position = src.checkpoint_state()
        return self._keep_rows(source, batch, routed_queries, health), position

    poll_source.__ray_concurrency_group__ = "sources"  # as poll_kafka: its wait holds up nothing else

    def _changelog_metrics(self, source: str, src) -> dict | None:
        """The connector's own ``changelog_metrics()`` (a CDC source's slot, position, lag: it may
        ask its server), at most once a second; the head shows the last one."""
        read = getattr(src, "changelog_metrics", None)
        if read is None:
            return None
        now = time.monotonic()
        last = self.changelog_seen.get(source)
        if last is None or now - last[0] >= 1.0:
            try:
                last = (now, read())
            except Exception:  # noqa: BLE001 - the server unreachable: the poll's health says so
                last = (now, None)
            self.changelog_seen[source] = last
        return last[1]

    def source_committed(self, source: str, state_json: str) -> None:
        """A checkpoint holding ``source`` at this position committed (``Source.checkpoint_committed``:
        a CDC source confirms its replication position only then)."""
        import json

        with self._source_lock(source):
            hook = getattr(self.kafka.get(source), "checkpoint_committed", None)
            if hook is not None:
                hook(json.loads(state_json))

    def kafka_lag(self, source: str) -> int:
        with self._source_lock(source):
            return self.kafka[source].lag()

    def stop_kafka(self, source: str) -> None:
        with self._source_lock(source):
            src = self.kafka.pop(source, None)
            if src is not None:
                src.close()

    def load_sample(self) -> dict:
        """The autoscaler's counters (cheap, unlike ``metrics``): seconds busy running batches
        plus CPU seconds reading Kafka, and the rows read from Kafka and run in batches."""
        with self._counters:
            return {"busy_s": self.busy_s + self.poll_cpu_s, "polled_rows": self.polled_rows,
                    "rows_in": self.rows_in}

    # answered on the heartbeat's thread: a sample while batches queue on the main thread is
    # what the autoscaler needs most (polls now run beside those batches and keep them coming)
    load_sample.__ray_concurrency_group__ = "liveness"

    def metrics(self) -> dict:
        from laminardb.metrics.registry import state_size

        m = self.conn.metrics()
        for node, state in self.partial.items():  # partial aggregates keep their state here
            q = m["queries"].get(node)
            if q is not None:
                q["state_rows"] = int(getattr(state.agg, "state_groups", 0) or 0)
                q["state_bytes"] = state_size(state.agg)
        m.update(index=self.index, core=self.core, pid=os.getpid(), rows_in=self.rows_in, busy_s=self.busy_s,
                 cpu_s=self.cpu_s, poll_cpu_s=self.poll_cpu_s)
        return m


def _part_bytes(part: bytes | str | None) -> bytes | None:
    """A checkpoint part as the head hands it over: its bytes, or the path of the file this
    actor (or another) wrote (``ClusterImage.write_parts``)."""
    if isinstance(part, str):
        with open(part, "rb") as f:
            return f.read()
    return part


def _type_text(t: pa.DataType) -> str:
    from laminardb.sql.types import type_name

    return type_name(t)


_SOURCE_THREADS = 8  # sources polled at once on one actor; more wait for a thread


def actor_class():
    import ray

    # every method but heartbeat, load_sample and the source polls runs in the default group:
    # one thread, in submission order; polls of different sources run side by side (one each:
    # the head has one poller per source)
    return ray.remote(num_cpus=1, concurrency_groups={"liveness": 1, "sources": _SOURCE_THREADS})(ReactorActorImpl)


def _late_ipc(late: pa.RecordBatch | None) -> bytes | None:
    return to_ipc(late) if late is not None and late.num_rows else None


def _rows_meta(outs: list[pa.RecordBatch], late: pa.RecordBatch | None, closed: list[pa.RecordBatch]) -> tuple:
    """What the head learns of one batch whose rows it hands on by reference: the output and
    closed row counts (the rows lie in that order in ``_rows_ipc``), and the late rows."""
    return sum(b.num_rows for b in outs), _late_ipc(late), sum(b.num_rows for b in closed)


def _rows_ipc(batches: list[pa.RecordBatch]) -> bytes | None:
    """Rows for the head's subscribers, as one IPC stream (None: no row)."""
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return None
    schema = batches[0].schema
    return to_ipc_table(pa.Table.from_batches([b if b.schema.equals(schema) else b.cast(schema) for b in batches],
                                              schema=schema))
