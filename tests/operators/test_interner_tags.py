"""The interner's short-key tags and growing tables, and the group table's last-slot hint,
checked against plain-Python dicts (the oracle) on keys chosen to break them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from laminardb.operators._interner import GroupTable, Interner

# keys that differ only in length or in trailing NUL / 0x01 bytes, at the 7/8-byte tag boundary,
# non-ASCII UTF-8, the empty string and NULL
TRICKY = ["", "a", "a\x00", "a\x00\x00", "\x00", "\x00\x00", "abcdefg", "abcdefg\x01", "abcdef\x01",
          "abcdefgh", "abcdefgh\x00", "ü", "üü", "日本語", "日本語x", "héllo wörld, a long key", None,
          "\x01", "a\x01", "abcdefg\x00"]


def _check(it: Interner, batches: list[list]) -> None:
    ref: dict = {}
    for keys in batches:
        ids = it.intern([pa.array(keys, pa.string())]).tolist()
        assert ids == [ref.setdefault(k, len(ref)) for k in keys]
    assert it.take(np.arange(len(it)))[0].to_pylist() == list(ref)


def test_tricky_keys_get_distinct_ids_and_round_trip():
    rng = np.random.default_rng(5)
    _check(Interner([pa.string()]), [[TRICKY[i] for i in rng.integers(0, len(TRICKY), 500)] for _ in range(3)])


def test_table_grows_within_one_batch_and_across_batches():
    rng = np.random.default_rng(6)
    keys = [f"k{i}" for i in range(3000)] + [f"key-number-{i}-long" for i in range(3000)]
    batches = [[keys[i] for i in rng.integers(0, len(keys), 20_000)] for _ in range(3)]
    it = Interner([pa.string()])
    _check(it, batches)
    assert len(it.tab_ids) <= 4 * 8192  # grown with the keys (≤ 1/4 full), not with the rows


def test_binary_and_multi_column_keys_still_interned_exactly():
    it = Interner([pa.string(), pa.int64()])
    a = pa.array(["x", "x", "x\x00", None, "x"], pa.string())
    b = pa.array([1, 2, 1, 1, 1], pa.int64())
    assert it.intern([a, b]).tolist() == [0, 1, 2, 3, 0]


def test_group_table_hint_survives_removal_and_slot_reuse():
    rng = np.random.default_rng(7)
    g = GroupTable()
    ref: dict = {}  # (key, window) → slot, for live groups
    for step in range(40):
        keys = rng.integers(0, 300, 2000).astype(np.int64)
        wins = (step // 4 + rng.integers(0, 2, 2000)).astype(np.int64)
        slots = g.upsert(keys, wins, 300)
        for k, w, s in zip(keys.tolist(), wins.tolist(), slots.tolist(), strict=True):
            assert ref.setdefault((k, w), s) == s
        assert len(set(ref.values())) == len(ref) == g.n_live  # one slot per live group
        if step % 3 == 2:  # close the oldest window: its slots are freed and reused later
            oldest = min(w for _, w in ref)
            gone = [key for key in ref if key[1] == oldest]
            g.remove(np.array([ref.pop(key) for key in gone], np.int64))
