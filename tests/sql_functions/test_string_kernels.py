"""The numba string kernels (``laminardb/sql/_string_kernels.py``) and REGEXP_EXTRACT's literal
prefilter, against DuckDB over the same rows: sliced and large_string arrays, NULLs, '',
non-ASCII UTF-8, multi-byte and overlapping delimiters, rows without a match."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from laminardb.sql._string_kernels import contains_literal, split_index
from laminardb.sql.functions import required_literal
from tests.engine.oracle import duck
from tests.sql_functions.harness import run_select

_WORDS = ["a", "b", "", "::", ":", "/", "ü", "日本", "&", "=", "x=", "channel_id=", "ab", "é/"]


def _strings(n: int, seed: int) -> list[str | None]:
    rng = np.random.default_rng(seed)
    out: list[str | None] = ["".join(rng.choice(_WORDS, size=rng.integers(0, 9))) for _ in range(n)]
    for i in rng.integers(0, n, size=n // 15):
        out[i] = None
    return out


def _sq(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


@pytest.mark.parametrize("delim", ["/", "::", "日本", "é/", "a"])
@pytest.mark.parametrize("large", [False, True])
def test_split_index_kernel_equals_duckdb_on_a_slice(delim, large):
    s = _strings(700, seed=len(delim))
    arr = pa.array(s, pa.large_string() if large else pa.string()).slice(100, 500)  # offset ≠ 0
    rng = np.random.default_rng(3)
    idx = rng.integers(-1, 7, size=len(arr)).astype(np.int64)
    got = split_index(arr, delim, idx)
    assert got.type == arr.type
    rows = pa.table({"s": arr.cast(pa.string()), "i": pa.array(idx)})
    want = duck(f"SELECT CASE WHEN i < 0 OR s = '' THEN NULL ELSE string_split(s, {_sq(delim)})[i + 1] END AS r "
                "FROM rows", rows=rows)["r"]
    assert got.to_pylist() == want.to_pylist()
    assert got.null_count > arr.null_count  # some indexes are past the last piece


@pytest.mark.parametrize("literal", ["channel_id=", "::", "ü", "日本&", "zzz"])
def test_contains_literal_equals_duckdb(literal):
    arr = pa.array(_strings(600, seed=9), pa.string()).slice(7)
    got = contains_literal(arr, literal)
    want = duck(f"SELECT coalesce(contains(s, {_sq(literal)}), false) AS c FROM rows",
                rows=pa.table({"s": arr}))["c"].to_pylist()
    assert got.tolist() == want


def _random_pattern(rng: np.random.Generator, depth: int = 0) -> str:
    """A small RE2 pattern: literals, classes, dots, anchors, groups, alternation, quantifiers."""
    atoms = ["a", "b", "x", "=", "&", "[ab]", "[^&]", ".", "ü", r"\d", "ab", "x="]
    parts = []
    for _ in range(rng.integers(1, 5)):
        r = rng.random()
        if r < 0.2 and depth < 2:
            inner = _random_pattern(rng, depth + 1)
            parts.append(f"({inner}|{_random_pattern(rng, depth + 1)})" if rng.random() < 0.5 else f"({inner})")
        elif r < 0.25:
            parts.append("^" if not parts else "$")
        else:
            parts.append(str(rng.choice(atoms)))
        if rng.random() < 0.25:
            parts[-1] += str(rng.choice(["*", "+", "?", "{1,2}"]))
    pat = "".join(parts)
    return pat + "|b" if depth == 0 and rng.random() < 0.1 else pat


def test_required_literal_is_in_every_match():
    """Soundness of the prefilter: wherever DuckDB (RE2) finds a match, the literal is there."""
    rng = np.random.default_rng(17)
    words = ["a", "b", "x", "=", "&", "ü", "1", "ab", "x=", "bx="]
    s = ["".join(rng.choice(words, size=rng.integers(0, 7))) for _ in range(400)]
    rows = pa.table({"s": pa.array(s)})
    checked = 0
    for _ in range(500):
        pat = _random_pattern(rng)
        lit = required_literal(pat)
        if lit is None:
            continue
        matched = duck(f"SELECT s FROM rows WHERE regexp_matches(s, {_sq(pat)})", rows=rows)["s"].to_pylist()
        assert all(lit in m for m in matched), (pat, lit)
        checked += bool(matched)
    assert checked > 20  # the fuzz reached patterns that match and have a literal


def test_regexp_extract_with_prefilter_equals_duckdb(db):
    """Through the engine: a pattern with a required literal over rows with and without it."""
    s = _strings(800, seed=21) + ["channel_id=1&channel_id=2", "x&channel_id=", "channel_id", None, ""]
    rows = pa.table({"id": pa.array(range(len(s)), pa.int64()), "s": pa.array(s, pa.string()),
                     "i": pa.array([0] * len(s), pa.int64())})
    p = _sq("(&|^)channel_id=([^&]*)")
    got = run_select(db, "CREATE SOURCE t (id BIGINT, s VARCHAR, i BIGINT)",
                     f"SELECT id, REGEXP_EXTRACT(s, {p}, 2) AS r FROM t", rows).sort_by("id")
    want = duck(f"SELECT id, CASE WHEN regexp_matches(s, {p}) THEN regexp_extract(s, {p}, 2) END AS r "
                "FROM rows ORDER BY id", rows=rows)
    assert got["r"].to_pylist() == want["r"].to_pylist()
    assert 0 < got["r"].null_count < len(s) - 50  # both matches and rows skipped by the prefilter


@pytest.mark.parametrize("pattern", ["%channel_id=%", "%日本%", "%::%", "%ü%", "%\\%", "%zz%"])
def test_like_substring_equals_duckdb(db, pattern):
    """LIKE '%text%' takes the numba byte search; NOT LIKE and NULL rows as DuckDB has them."""
    s = _strings(600, seed=31) + ["a\\b", None, ""]
    rows = pa.table({"id": pa.array(range(len(s)), pa.int64()), "s": pa.array(s, pa.string()),
                     "i": pa.array([0] * len(s), pa.int64())})
    p = _sq(pattern)
    got = run_select(db, "CREATE SOURCE t (id BIGINT, s VARCHAR, i BIGINT)",
                     f"SELECT id, s LIKE {p} AS l, s NOT LIKE {p} AS nl FROM t", rows).sort_by("id")
    want = duck(f"SELECT id, s LIKE {p} AS l, s NOT LIKE {p} AS nl FROM rows ORDER BY id", rows=rows)
    assert got.to_pylist() == want.to_pylist()
