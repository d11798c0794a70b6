"""The numba record-batch parser (``_kafka_records.parse_records``) against batches built by
kafka-python's own ``kafka.record`` builders and read back by its ``MemoryRecords`` (the
oracle): plain, gzip, control, legacy magic 0/1, offsets before the fetch position, partial
trailing batches, CRC and length corruption."""

from __future__ import annotations

import random
import struct

import pytest
from crc32c import crc32c
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from laminardb.connectors._kafka_records import CorruptBatchError, parse_records

GZIP = 1


def batch(base: int, records: list[tuple[bytes | None, bytes | None]], *, codec: int = 0,
          ts0: int = 1_700_000_000_000, headers: bool = False) -> bytes:
    """One v2 batch whose records get offsets base, base + 1, …"""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 30)
    for i, (key, value) in enumerate(records):
        b.append(i, timestamp=ts0 + 7 * i, key=key, value=value,
                 headers=[("h", b"x" * i)] if headers else [])
    out = bytearray(b.build())
    struct.pack_into(">q", out, 0, base)  # the broker assigns the base offset (not in the CRC)
    return bytes(out)


def with_attributes(data: bytes, set_bits: int) -> bytes:
    """The batch with extra attribute bits and a recomputed CRC."""
    out = bytearray(data)
    attrs = struct.unpack_from(">h", out, 21)[0] | set_bits
    struct.pack_into(">h", out, 21, attrs)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def oracle(data: bytes, fetch_offset: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
    out = []
    records = MemoryRecords(data)
    while (b := records.next_batch()) is not None:
        if getattr(b, "is_control_batch", False):
            continue
        out += [(r.offset, r.timestamp, r.key, r.value) for r in b if r.offset >= fetch_offset]
    return out


def rows(data: bytes, fetch_offset: int = 0) -> list[tuple[int, int, bytes | None, bytes | None]]:
    r = parse_records(data, fetch_offset)
    return list(zip(r.offsets.tolist(), r.timestamps.tolist(), r.keys.to_pylist(),
                    r.values.to_pylist(), strict=True))


def test_plain_batches_match_kafka_python() -> None:
    data = (batch(0, [(None, b'{"a": 1}'), (b"k1", b"v1"), (b"k2", None), (b"", b"")],
                  headers=True)
            + batch(4, [(None, b"x" * 300), (b"k", b"\n")])
            + batch(6, [(None, bytes(range(256)))]))
    got = rows(data)
    assert got == oracle(data, 0)
    assert [g[0] for g in got] == list(range(7))
    r = parse_records(data, 0)
    assert r.next_offset == 7 and not r.partial
    assert r.values.type == r.keys.type  # large_binary both
    assert r.values.null_count == 1 and r.keys.null_count == 3


def test_random_batches_match_kafka_python() -> None:
    rng = random.Random(5)
    data, base = b"", 100
    for _ in range(20):
        recs = []
        for _ in range(rng.randint(1, 50)):
            key = None if rng.random() < 0.5 else rng.randbytes(rng.randint(0, 20))
            value = None if rng.random() < 0.05 else rng.randbytes(rng.randint(0, 400))
            recs.append((key, value))
        data += batch(base, recs, codec=GZIP if rng.random() < 0.3 else 0,
                      headers=rng.random() < 0.5)
        base += len(recs)
    for start in (0, 100, 137, base - 1, base):
        assert rows(data, start) == oracle(data, start)
        assert parse_records(data, start).next_offset == base


def test_gzip_batch_and_fetch_offset_inside_a_batch() -> None:
    data = batch(10, [(None, f"m{i}".encode()) for i in range(8)], codec=GZIP)
    assert rows(data, 13) == oracle(data, 13)
    assert [o for o, *_ in rows(data, 13)] == list(range(13, 18))
    assert parse_records(data, 13).next_offset == 18
    plain = batch(10, [(None, f"m{i}".encode()) for i in range(8)])
    assert [v for *_, v in rows(plain, 16)] == [b"m6", b"m7"]


def test_partial_trailing_batch_is_ignored() -> None:
    whole = batch(0, [(None, b"a"), (None, b"b")])
    tail = batch(2, [(None, b"c" * 100)])
    r = parse_records(whole + tail[:70], 0)
    assert r.values.to_pylist() == [b"a", b"b"] and r.next_offset == 2 and r.partial
    only = parse_records(tail[:30], 2)  # not even one batch: the caller must fetch more
    assert len(only) == 0 and only.next_offset == 2 and only.partial
    empty = parse_records(None, 5)
    assert len(empty) == 0 and empty.next_offset == 5 and not empty.partial


def test_control_batch_is_skipped_but_advances_the_position() -> None:
    control = with_attributes(batch(3, [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")]),
                              0x20 | 0x10)
    data = batch(0, [(None, b"a"), (None, b"b"), (None, b"c")]) + control
    r = parse_records(data, 0)
    assert r.values.to_pylist() == [b"a", b"b", b"c"] and r.next_offset == 4


def test_log_append_time_uses_the_batch_max_timestamp() -> None:
    data = with_attributes(batch(0, [(None, b"a"), (None, b"b")], ts0=1_000), 0x08)
    assert [t for _, t, *_ in rows(data)] == [1_007, 1_007]
    assert [t for _, t, *_ in rows(batch(0, [(None, b"a"), (None, b"b")], ts0=1_000))] == [
        1_000, 1_007]


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_sets_go_through_kafka_python(magic: int) -> None:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    for i in range(3):
        b.append(i, timestamp=None if magic == 0 else 5_000 + i, key=None,
                 value=f"v{i}".encode())
    legacy = bytes(b.build())
    r = parse_records(legacy, 1)
    assert r.offsets.tolist() == [1, 2] and r.values.to_pylist() == [b"v1", b"v2"]
    assert r.next_offset == 3
    mixed = parse_records(legacy + batch(3, [(None, b"v3")]), 0)
    assert mixed.offsets.tolist() == [0, 1, 2, 3] and mixed.next_offset == 4


def test_corruption_raises() -> None:
    data = bytearray(batch(0, [(None, b"hello"), (None, b"world")]))
    data[-2] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC"):
        parse_records(bytes(data), 0)
    good = batch(0, [(None, b"hello")])
    # a record length beyond the batch, with a valid CRC: caught by the kernel
    bad = bytearray(good)
    bad[61] = 0x7E  # zigzag 63: far past the 1-record batch
    struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))
    with pytest.raises(CorruptBatchError, match="lengths"):
        parse_records(bytes(bad), 0)


def test_slice_keeps_next_offset() -> None:
    r = parse_records(batch(0, [(None, b"a"), (None, b"b"), (None, b"c")]), 0)
    head, tail = r.slice(0, 2), r.slice(2, 3)
    assert head.next_offset == 2 and head.values.to_pylist() == [b"a", b"b"]
    assert tail.next_offset == 3 and tail.values.to_pylist() == [b"c"]
