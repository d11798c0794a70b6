"""Kafka record batches (the bytes of one partition in a Fetch response) → Arrow arrays.

Entry point: :func:`parse_records` (``parse_records(data, fetch_offset)`` →
:class:`Records`: offsets, timestamps, and the keys and values as ``large_binary`` arrays).

Why not kafka-python's parser: it builds one Python ``ConsumerRecord`` per message
(``kafka.record.default_records._read_msg`` plus varint decoding in Python), which caps a
consumer at ~100k messages/s — 95 % of the consume time in ``bench/bench_kafka.py`` — while
the broker serves ~3M/s and the JSON decoder ~1M/s. Here two numba kernels walk the record
batch format (magic 2, KIP-98) over the raw buffer: :func:`_scan` reads the 61-byte batch
headers, :func:`_parse` the records' zigzag varints (length, attributes, timestampDelta,
offsetDelta, key, value, headers), and :func:`_gather` copies keys and values into
contiguous Arrow buffers. Python runs once per fetch response, plus once per compressed or
legacy batch.

Handled: compressed batches (decompressed with ``kafka.codec``, then the same kernel), control
batches (no rows; with ``transactions=True`` their COMMIT/ABORT type is reported in
:attr:`Records.batches`, with each batch's producer id and transactional bit, for the
read_committed filter of :mod:`laminardb.connectors._kafka_fetch`), legacy magic 0/1 message sets (kafka-python's ``MemoryRecords``: rare, old
producers), records before the fetch offset (a broker returns whole batches: skipped), a
partial batch at the end of the response (ignored: the next fetch starts at it), CRC32-C of
every v2 batch (``crc32c``, as kafka-python's ``check_crcs``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numba import njit

__all__ = ["ABORT", "COMMIT", "CONTROL", "CorruptBatchError", "DATA", "Records", "TRANSACTIONAL",
           "parse_records", "warm_up"]

_HEADER = 61  # v2 batch header bytes: records start here
_LOG_OVERHEAD = 12  # baseOffset int64 + batchLength int32: batchLength counts what follows
_CODEC_MASK, _LOG_APPEND_TIME, CONTROL = 0x07, 0x08, 0x20
TRANSACTIONAL = 0x10  # attributes bit: the batch belongs to a transaction (KIP-98)
# Records.batches[:, 4]: what a batch is — data, or the control record ending a transaction
# (the control record's key is int16 version, int16 type; type 0 = ABORT, 1 = COMMIT).
DATA, ABORT, COMMIT = -1, 0, 1


class CorruptBatchError(ValueError):
    """A record batch whose CRC or record lengths do not add up (corrupt data or a bug)."""


@dataclass
class Records:
    """The records of one fetch response for one partition, in offset order."""

    offsets: np.ndarray  # int64
    timestamps: np.ndarray  # int64 epoch ms (CreateTime or LogAppendTime)
    keys: pa.Array  # large_binary, null for no key
    values: pa.Array  # large_binary, null for a tombstone
    next_offset: int  # where the next fetch starts: past the last complete batch
    partial: bool  # bytes after the last complete batch (or no complete batch at all)
    # with parse_records(transactions=True): one row per batch ending at or after the fetch
    # offset, in offset order: (base_offset, last_offset, attributes, producer_id, kind)
    # with kind DATA, ABORT or COMMIT
    batches: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    def slice(self, start: int, stop: int) -> Records:
        """Rows [start, stop) (zero-copy); next_offset is the offset after row stop − 1, or
        this one's next_offset when the slice reaches the end."""
        n = len(self.offsets)
        nxt = self.next_offset if stop >= n else int(self.offsets[stop - 1]) + 1
        return Records(self.offsets[start:stop], self.timestamps[start:stop],
                       self.keys.slice(start, stop - start),
                       self.values.slice(start, stop - start), nxt, self.partial)


@njit(inline="always")
def _be(buf, p, n):
    v = np.int64(0)
    for i in range(n):
        v = (v << np.int64(8)) | np.int64(buf[p + i])
    return v


@njit(inline="always")
def _varint(buf, p, end):
    """Zigzag varint at p → (value, next p); next p = −1 if it runs past end."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    while True:
        if p >= end or shift > np.uint64(63):
            return np.int64(0), -1
        b = np.uint64(buf[p])
        p += 1
        raw |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            break
        shift += np.uint64(7)
    return np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1)), p


@njit(cache=True, nogil=True)
def _scan(buf):
    """Complete batches in buf: (pos, size, magic, attributes, base_offset, last_delta,
    count, first_ts, max_ts, producer_id) arrays. Stops at the first incomplete one."""
    n = len(buf)
    cap = max(1, n // 26)
    meta = np.empty((cap, 10), np.int64)
    k = 0
    p = 0
    while p + 17 <= n and k < cap:
        size = _be(buf, p + 8, 4) + _LOG_OVERHEAD
        if size < 26 or p + size > n:
            break
        magic = np.int64(buf[p + 16])
        row = meta[k]
        row[0], row[1], row[2] = p, size, magic
        row[4] = _be(buf, p, 8)
        if magic == 2:
            if size < _HEADER:
                break
            row[3] = _be(buf, p + 21, 2)
            d = _be(buf, p + 23, 4)
            row[5] = d - (np.int64(1) << 32) if d >= (np.int64(1) << 31) else d
            row[6] = _be(buf, p + 57, 4)
            row[7] = _be(buf, p + 27, 8)
            row[8] = _be(buf, p + 35, 8)
            row[9] = _be(buf, p + 43, 8)
        else:
            row[3] = row[5] = row[6] = row[7] = row[8] = 0
            row[9] = -1
        k += 1
        p += size
    return meta[:k], p


@njit(cache=True, nogil=True)
def _parse(buf, starts, ends, counts, base_offsets, first_ts, max_ts, log_append, min_offset,
           offsets, ts, kpos, klen, vpos, vlen):
    """Records of the batches whose record bytes are buf[starts[b]:ends[b]]; writes the
    records at or after min_offset from index 0; returns (rows written, −1) or (rows, bad
    batch index) when a batch's lengths do not add up."""
    k = 0
    for b in range(len(starts)):
        p = starts[b]
        end = ends[b]
        for _ in range(counts[b]):
            length, p = _varint(buf, p, end)
            if p < 0 or length < 0 or p + length > end:
                return k, b
            rec_end = p + length
            p += 1  # attributes (unused)
            tsd, p = _varint(buf, p, rec_end)
            if p < 0:
                return k, b
            od, p = _varint(buf, p, rec_end)
            if p < 0:
                return k, b
            kl, p = _varint(buf, p, rec_end)
            if p < 0 or p + max(kl, 0) > rec_end:
                return k, b
            kp = p
            p += max(kl, 0)
            vl, p = _varint(buf, p, rec_end)
            if p < 0 or p + max(vl, 0) > rec_end:
                return k, b
            vp = p
            p = rec_end  # headers: not read
            off = base_offsets[b] + od
            if off < min_offset:
                continue
            offsets[k] = off
            ts[k] = max_ts[b] if log_append[b] else first_ts[b] + tsd
            kpos[k], klen[k], vpos[k], vlen[k] = kp, kl, vp, vl
            k += 1
    return k, -1


@njit(cache=True, nogil=True)
def _gather(buf, pos, lens, n):
    """Arrow large_binary buffers (int64 offsets, data, valid) of buf[pos[i]:pos[i]+lens[i]];
    lens[i] < 0 is null."""
    total = 0
    for i in range(n):
        total += max(lens[i], 0)
    offs = np.empty(n + 1, np.int64)
    data = np.empty(max(total, 1), np.uint8)
    valid = np.empty(n, np.bool_)
    o = 0
    for i in range(n):
        offs[i] = o
        ln = lens[i]
        valid[i] = ln >= 0
        if ln > 0:
            data[o:o + ln] = buf[pos[i]:pos[i] + ln]
            o += ln
    offs[n] = o
    return offs, data, valid


def _binary(buf: np.ndarray, pos: np.ndarray, lens: np.ndarray) -> pa.Array:
    n = len(pos)
    if n == 0:
        return pa.array([], pa.large_binary())
    if (lens < 0).all():
        return pa.nulls(n, pa.large_binary())
    offs, data, valid = _gather(buf, pos, lens, n)
    nulls = n - int(valid.sum())
    bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.large_binary(), n,
                                 [bitmap, pa.py_buffer(offs), pa.py_buffer(data)], nulls)


def _records_of(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, meta: np.ndarray,
                min_offset: int) -> tuple[np.ndarray, ...]:
    """Run :func:`_parse` over the batches described by ``meta`` rows."""
    total = int(meta[:, 6].sum())
    offsets, ts = np.empty(total, np.int64), np.empty(total, np.int64)
    kpos, klen = np.empty(total, np.int64), np.empty(total, np.int64)
    vpos, vlen = np.empty(total, np.int64), np.empty(total, np.int64)
    log_append = (meta[:, 3] & _LOG_APPEND_TIME) != 0
    k, bad = _parse(buf, starts, ends, meta[:, 6].copy(), meta[:, 4].copy(), meta[:, 7].copy(),
                    meta[:, 8].copy(), log_append, min_offset, offsets, ts, kpos, klen, vpos, vlen)
    if bad >= 0:
        msg = (f"record batch at offset {int(meta[bad, 4])}: record lengths run past the "
               "batch; the data is corrupt")
        raise CorruptBatchError(msg)
    return (offsets[:k], ts[:k], _binary(buf, kpos[:k], klen[:k]),
            _binary(buf, vpos[:k], vlen[:k]))


def _decompress(codec: int, payload: memoryview) -> bytes:
    from kafka import codec as kc

    if codec == 1:
        return kc.gzip_decode(payload)
    decode, has = {2: (kc.snappy_decode, kc.has_snappy), 3: (kc.lz4_decode, kc.has_lz4),
                   4: (kc.zstd_decode, kc.has_zstd)}.get(codec, (None, None))
    if decode is None:
        raise CorruptBatchError(f"unknown compression codec {codec} in a record batch")
    if not has():
        name = {2: "python-snappy", 3: "lz4", 4: "zstandard"}[codec]
        msg = f"a record batch is compressed with codec {codec}: install {name} to read it"
        raise CorruptBatchError(msg)
    return decode(payload.tobytes())


def _legacy(data: memoryview, min_offset: int) -> tuple[np.ndarray, ...]:
    """Magic 0/1 message sets through kafka-python (rare: brokers before 0.11's format)."""
    from kafka.record import MemoryRecords

    offs, tss, keys, vals = [], [], [], []
    records = MemoryRecords(data.tobytes())
    while (batch := records.next_batch()) is not None:
        for r in batch:
            if r.offset >= min_offset:
                offs.append(r.offset)
                tss.append(r.timestamp if r.timestamp is not None else -1)
                keys.append(r.key)
                vals.append(r.value)
    return (np.array(offs, np.int64), np.array(tss, np.int64),
            pa.array(keys, pa.large_binary()), pa.array(vals, pa.large_binary()))


def _check_crc(view: memoryview, meta: np.ndarray) -> None:
    from crc32c import crc32c

    for row in meta:
        pos, size = int(row[0]), int(row[1])
        want = int.from_bytes(view[pos + 17:pos + 21], "big")
        if crc32c(view[pos + 21:pos + size]) != want:
            msg = f"record batch at offset {int(row[4])} fails its CRC check; the data is corrupt"
            raise CorruptBatchError(msg)


def _control_kind(view: memoryview, row: np.ndarray) -> int:
    """ABORT or COMMIT: the type in the key of a control batch's (first) record."""
    pos, size, attrs = int(row[0]), int(row[1]), int(row[3])
    body = view[pos + _HEADER:pos + size]
    if attrs & _CODEC_MASK:  # Kafka never compresses control batches; accept it anyway
        body = memoryview(_decompress(attrs & _CODEC_MASK, body))
    p = 0
    fields = []
    for _ in range(4):  # length, [attributes byte], timestampDelta, offsetDelta, keyLength
        raw = shift = 0
        while p < len(body):
            b = body[p]
            p += 1
            raw |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        fields.append((raw >> 1) ^ -(raw & 1))
        if len(fields) == 1:
            p += 1  # the record's attributes byte
    key_len = fields[3]
    if key_len < 4 or p + 4 > len(body):
        msg = f"control batch at offset {int(row[4])} has no COMMIT/ABORT key; the data is corrupt"
        raise CorruptBatchError(msg)
    kind = int.from_bytes(body[p + 2:p + 4], "big", signed=True)
    return COMMIT if kind == 1 else ABORT if kind == 0 else DATA  # other types: no decision


def _batch_info(view: memoryview, meta: np.ndarray, fetch_offset: int) -> np.ndarray:
    """Records.batches for the v2 batches of ``meta`` ending at or after ``fetch_offset``
    (legacy batches: non-transactional data)."""
    last = meta[:, 4] + np.where(meta[:, 2] == 2, meta[:, 5], 0)
    keep = last >= fetch_offset
    out = np.empty((int(keep.sum()), 5), np.int64)
    out[:, 0] = meta[keep, 4]
    out[:, 1] = last[keep]
    out[:, 2] = np.where(meta[keep, 2] == 2, meta[keep, 3], 0)
    out[:, 3] = meta[keep, 9]
    out[:, 4] = DATA
    for i in np.flatnonzero(out[:, 2] & CONTROL).tolist():
        out[i, 4] = _control_kind(view, meta[np.flatnonzero(keep)[i]])
    return out


def parse_records(data: bytes | memoryview | None, fetch_offset: int, *,
                  check_crcs: bool = True, transactions: bool = False) -> Records:
    """The records at or after ``fetch_offset`` in ``data`` (a partition's ``records`` field
    of a Fetch response); with ``transactions``, also :attr:`Records.batches`.

    Raises:
        CorruptBatchError: a CRC mismatch, record lengths that run past their batch, or a
            codec that is not installed.
    """
    view = memoryview(data if data is not None else b"").cast("B")
    buf = np.frombuffer(view, np.uint8)
    meta, used = _scan(buf)
    partial = used < len(buf)
    next_offset = fetch_offset
    if len(meta):
        last = meta[-1]
        next_offset = max(fetch_offset, int(last[4] + (last[5] if last[2] == 2 else 0) + 1))
    v2 = meta[:, 2] == 2
    if check_crcs and v2.any():
        _check_crc(view, meta[v2])
    plain = v2 & ((meta[:, 3] & (_CODEC_MASK | CONTROL)) == 0) & (meta[:, 6] > 0)
    if plain.all():  # the common case: one kernel call over every batch
        parts = [_records_of(buf, meta[:, 0] + _HEADER, meta[:, 0] + meta[:, 1], meta,
                             fetch_offset)] if len(meta) else []
    else:
        parts = []
        i = 0
        while i < len(meta):
            if plain[i]:  # a run of plain batches: one call
                j = i
                while j < len(meta) and plain[j]:
                    j += 1
                run = meta[i:j]
                parts.append(_records_of(buf, run[:, 0] + _HEADER, run[:, 0] + run[:, 1], run,
                                         fetch_offset))
                i = j
                continue
            row = meta[i]
            pos, size, magic, attrs = (int(x) for x in row[:4])
            if magic != 2:
                parts.append(_legacy(view[pos:pos + size], fetch_offset))
            elif not attrs & CONTROL and row[6] > 0:  # compressed
                inner = np.frombuffer(_decompress(attrs & _CODEC_MASK,
                                                  view[pos + _HEADER:pos + size]), np.uint8)
                parts.append(_records_of(inner, np.zeros(1, np.int64),
                                         np.full(1, len(inner), np.int64), meta[i:i + 1],
                                         fetch_offset))
            i += 1  # control batches and empty batches carry no rows
    batches = _batch_info(view, meta, fetch_offset) if transactions else None
    if not parts:
        empty = np.empty(0, np.int64)
        nothing = pa.array([], pa.large_binary())
        return Records(empty, empty, nothing, nothing, next_offset, partial, batches)
    if len(parts) == 1:
        offsets, ts, keys, values = parts[0]
    else:
        offsets = np.concatenate([p[0] for p in parts])
        ts = np.concatenate([p[1] for p in parts])
        keys = pa.concat_arrays([p[2] for p in parts])
        values = pa.concat_arrays([p[3] for p in parts])
    return Records(offsets, ts, keys, values, next_offset, partial, batches)


def warm_up() -> None:
    """Load (or compile, the first time on a machine) the kernels with the argument types
    :func:`parse_records` uses, so the first fetch does not pay for it."""
    one = np.zeros(1, np.int64)
    meta = np.zeros((1, 10), np.int64)
    buf = np.frombuffer(b"\0", np.uint8)  # read-only, as fetched bytes: its own signature
    _scan(buf)
    _records_of(buf, one, one, meta, 0)
    _gather(buf, one, one.copy(), 1)
