"""A small generator library with hypothesis's strategy vocabulary (``sampled_from``, ``tuples``,
``one_of``, ``map``, ``flatmap``, ``filter`` …) drawing from a ``random.Random``.

Why not hypothesis strategies for the expressions themselves: a recursive grammar of ~60
productions made hypothesis spend minutes building and replaying strategy trees, and its
replay saw the trees differ ("inconsistent data generation"). Here hypothesis draws the rows
and one seed per example; the seed picks the expressions, so a run is still reproducible
(``derandomize``) and a failure still names its seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any


class S:
    def __init__(self, draw: Callable[[random.Random], Any]) -> None:
        self._draw = draw

    def draw(self, rnd: random.Random) -> Any:
        return self._draw(rnd)

    def map(self, f) -> S:
        return S(lambda r: f(self._draw(r)))

    def flatmap(self, f) -> S:
        return S(lambda r: f(self._draw(r)).draw(r))

    def filter(self, ok) -> S:
        def draw(r):
            for _ in range(100):
                v = self._draw(r)
                if ok(v):
                    return v
            raise RuntimeError("filter rejected 100 draws in a row")
        return S(draw)


def sampled_from(values) -> S:
    values = list(values)
    return S(lambda r: r.choice(values))


def just(v) -> S:
    return S(lambda r: v)


def integers(lo: int, hi: int) -> S:
    return S(lambda r: r.randint(lo, hi))


def booleans() -> S:
    return S(lambda r: r.random() < 0.5)


def tuples(*parts: S) -> S:
    return S(lambda r: tuple(p.draw(r) for p in parts))


def one_of(*parts: S) -> S:
    return S(lambda r: r.choice(parts).draw(r))


def lists(part: S, min_size: int = 0, max_size: int = 5) -> S:
    return S(lambda r: [part.draw(r) for _ in range(r.randint(min_size, max_size))])


def deferred(make: Callable[[], S]) -> S:
    return S(lambda r: make().draw(r))
