"""Unit tests of the numba kernels and state classes against plain-Python references."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from laminardb.operators._buffers import encode_rows, hash_rows
from laminardb.operators._interner import GroupTable, Interner


def test_hash_is_stable_across_processes():
    cols = [pa.array(["AAPL", None, "", "MSFT"]), pa.array([1, 2, None, -5], type=pa.int64())]
    here = hash_rows(cols).tolist()
    code = (
        "import pyarrow as pa;from laminardb.operators._buffers import hash_rows;"
        "print(hash_rows([pa.array(['AAPL',None,'','MSFT']),pa.array([1,2,None,-5],type=pa.int64())]).tolist())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert here == eval(out.stdout)
    assert len(set(here)) == 4


def test_null_and_empty_string_keys_differ():
    off, data = encode_rows([pa.array(["", None, "a"])])
    rows = [bytes(data[off[i] : off[i + 1]]) for i in range(3)]
    assert len(set(rows)) == 3


def test_float_keys_canonical():
    off, data = encode_rows([pa.array([0.0, -0.0, float("nan"), float("nan")])])
    rows = [bytes(data[off[i] : off[i + 1]]) for i in range(4)]
    assert rows[0] == rows[1] and rows[2] == rows[3] and rows[0] != rows[2]


@pytest.mark.parametrize("n_keys", [3, 5000])
def test_interner_matches_dict(n_keys):
    rng = np.random.default_rng(1)
    it = Interner([pa.string(), pa.int64()])
    ref: dict = {}
    for _ in range(5):
        a = [f"k{v}" if v % 7 else None for v in rng.integers(0, n_keys, 3000)]
        b = rng.integers(0, 3, 3000).tolist()
        ids = it.intern([pa.array(a, pa.string()), pa.array(b, pa.int64())])
        for x, y, i in zip(a, b, ids, strict=True):
            assert ref.setdefault((x, y), len(ref)) == i
    vals = it.take(np.arange(len(it)))
    back = list(zip(vals[0].to_pylist(), vals[1].to_pylist(), strict=True))
    assert back == list(ref)


def test_group_table_reuses_slots_and_finds_groups():
    g = GroupTable()
    s1 = g.upsert(np.array([1, 2, 1], np.int64), np.array([0, 0, 0], np.int64))
    assert s1[0] == s1[2] and s1[0] != s1[1]
    g.remove(np.array([s1[0]]))
    s2 = g.upsert(np.array([2, 3], np.int64), np.array([0, 0], np.int64))
    assert s2[0] == s1[1]  # still found after a removal
    assert s2[1] == s1[0]  # freed slot reused
    big = g.upsert(np.arange(10_000, dtype=np.int64), np.zeros(10_000, np.int64))
    assert len(set(big.tolist())) == 10_000
