"""Event-time rules of a source: a plausible range, and how far ahead of the data a row may be.

Entry point: ``EventTimeRules.from_options(options, …)`` (from ``CREATE SOURCE … WITH (…)``),
then ``rules.check(values, refused, max_ts)`` per insert (used by ``insert_batch.to_batch``).

Why: one event time in the wrong unit — epoch µs or ns given to a BIGINT-ms or TIMESTAMP
column — moves the watermark to the year 56 million, and every later valid row is then late.
Such rows are refused as bad rows instead, with a message naming the likely unit.

Source options (``CREATE SOURCE s (…) WITH (event_time_range = '…', max_future = '…')``):

* ``event_time_range``: ``'FROM/TO'`` — ISO-8601 dates or times (UTC; ``Z``/offsets allowed),
  either side may be empty (unbounded); ``'off'`` disables the check. Default
  ``'1900-01-01/3000-01-01'``. Narrow it (e.g. ``'2000-01-01/2100-01-01'``) and epoch
  *seconds* (which as milliseconds fall in January 1970) are refused too.
* ``max_ahead_of_clock``: an interval, default ``'1 day'`` (none when ``event_time_range`` has
  no upper bound: ``'off'``, ``'2000-01-01/'``); ``'off'`` disables it. A row whose
  event time is more than that ahead of the wall clock (of the process that converts the rows;
  not ``config["clock"]``, which drives ``PROCTIME()`` in simulations) is refused. Why: one row dated in the year 2900 — inside the default range —
  would move the watermark there and every later valid row would be late and dropped. Real
  event times are never far ahead of now (a day covers clock skew and a local time taken for
  UTC); simulated future data turns the check off.
* ``max_future``: an interval (``'1 hour'``, ``'30s'``, ``'500 ms'``, ``INTERVAL '1' HOUR``);
  a row whose event time is more than that ahead of the source's max event time so far (over
  the rows accepted before it, also earlier rows of the same insert) is refused. Off by default;
  the first row a source ever accepts sets its max event time.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from laminardb.sql.arrays import numeric_view
from laminardb.sql.convert import (
    CODE_FUTURE,
    CODE_RANGE,
    DEFAULT_RANGE_MS,
    dateless_text,
    unit_hints,
)
from laminardb.sql.exceptions import UnsupportedSqlError
from laminardb.sql.intervals import unit_ms
from laminardb.sql.types import ticks_per_ms

#: the ``WITH (…)`` keys of CREATE SOURCE read here
OPTION_KEYS = ("event_time_range", "max_future", "max_ahead_of_clock")
DEFAULT_MAX_AHEAD = "1 day"
_DEFAULT_MAX_AHEAD_MS = 86_400_000

_NO_MAX = np.iinfo(np.int64).min  # the reactor's NO_WATERMARK: no row accepted yet
_UNIT_ALIASES = {"m": "MINUTE", "mins": "MINUTE", "sec": "SECOND", "secs": "SECOND", "hr": "HOUR",
                 "hrs": "HOUR"}


@njit(cache=True, nogil=True)
def _future_kernel(ticks, ok, start_max, limit, no_max):  # pragma: no cover - compiled
    """Row by row: refuse a row more than ``limit`` ahead of the max over accepted rows."""
    n = ticks.shape[0]
    refused = np.zeros(n, np.bool_)
    before = np.empty(n, np.int64)
    m = start_max
    for i in range(n):
        before[i] = m
        if not ok[i]:
            continue
        t = ticks[i]
        if m != no_max and t - m > limit:
            refused[i] = True
        elif m == no_max or t > m:
            m = t
    return refused, before


def _parse_instant(text: str, key: str, source: str) -> int:
    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    try:
        d = datetime.fromisoformat(t)
    except ValueError:
        msg = (f"source {source!r}: {key} bound {text!r} is not an ISO-8601 date or time; write e.g. "
               f"{key} = '2000-01-01/2100-01-01'")
        raise UnsupportedSqlError(msg) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    return int(d.timestamp() * 1000)


def parse_range(text: str, *, source: str) -> tuple[int | None, int | None] | None:
    """``'FROM/TO'`` (or ``'FROM..TO'``) → epoch ms bounds; None for ``'off'``."""
    t = text.strip()
    if t.lower() in ("off", "none", "false"):
        return None
    parts = t.split("/") if "/" in t else t.split("..")
    if len(parts) != 2:
        msg = (f"source {source!r}: event_time_range {text!r} is not 'FROM/TO'; write e.g. "
               "event_time_range = '2000-01-01/2100-01-01' (either side may be empty), or 'off'")
        raise UnsupportedSqlError(msg)
    lo = _parse_instant(parts[0], "event_time_range", source) if parts[0].strip() else None
    hi = _parse_instant(parts[1], "event_time_range", source) if parts[1].strip() else None
    if lo is not None and hi is not None and lo >= hi:
        raise UnsupportedSqlError(f"source {source!r}: event_time_range {text!r} is empty: FROM must be before TO")
    return lo, hi


def parse_interval_ms(text: str, *, key: str, source: str) -> int | None:
    """``'1 hour'``, ``'30s'``, ``INTERVAL '1' HOUR`` → ms; None for ``'off'``."""
    t = text.strip()
    if t.lower() in ("off", "none", "0"):
        return None
    m = re.fullmatch(r"(?i)(?:interval\s*)?'?\s*(\d+(?:\.\d+)?)\s*'?\s*([a-z]+)\s*'?", t)
    if m:
        unit = _UNIT_ALIASES.get(m.group(2).lower(), m.group(2))
        try:
            ms = float(m.group(1)) * unit_ms(unit)
        except Exception:  # noqa: BLE001 - an unknown unit: the message below says what to write
            ms = -1.0
        if ms > 0:
            return int(ms)
    msg = (f"source {source!r}: {key} {text!r} is not an interval; write e.g. {key} = '1 hour', "
           f"'30 seconds' or '500 ms' (or 'off')")
    raise UnsupportedSqlError(msg)


def wall_ms() -> int:
    """The wall clock in epoch ms: "now" for ``max_ahead_of_clock`` (tests replace it)."""
    return time.time_ns() // 1_000_000


def _fmt_instant(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _fmt_range(lo: int | None, hi: int | None) -> str:
    def f(ms: int | None) -> str:
        if ms is None:
            return ""
        d = datetime.fromtimestamp(ms / 1000, tz=UTC)
        return d.strftime("%Y-%m-%d") if ms % 86_400_000 == 0 else d.isoformat().replace("+00:00", "Z")
    return f"{f(lo)}/{f(hi)}"


@dataclass(frozen=True)
class EventTimeRules:
    """The event-time checks of one source's time column; see the module docstring."""

    source: str
    column: str
    ticks_per_ms: int
    lo_ms: int | None = DEFAULT_RANGE_MS[0]
    hi_ms: int | None = DEFAULT_RANGE_MS[1]
    max_future_ms: int | None = None
    max_future_text: str = ""
    max_ahead_ms: int | None = _DEFAULT_MAX_AHEAD_MS
    max_ahead_text: str = DEFAULT_MAX_AHEAD

    @classmethod
    def from_options(cls, options: dict[str, str], *, source: str, column: str,
                     time_type: pa.DataType) -> EventTimeRules:
        lo: int | None = DEFAULT_RANGE_MS[0]
        hi: int | None = DEFAULT_RANGE_MS[1]
        if "event_time_range" in options:
            bounds = parse_range(options["event_time_range"], source=source)
            lo, hi = (None, None) if bounds is None else bounds
        future, text = None, ""
        if "max_future" in options:
            text = options["max_future"].strip()
            future = parse_interval_ms(text, key="max_future", source=source)
        # an event_time_range without an upper bound ('off', 'FROM/') says "do not judge how far
        # ahead": the default clock bound goes with it; an explicit max_ahead_of_clock still holds
        ahead = _DEFAULT_MAX_AHEAD_MS if hi is not None else None
        ahead_text = DEFAULT_MAX_AHEAD
        if "max_ahead_of_clock" in options:
            ahead_text = options["max_ahead_of_clock"].strip()
            ahead = parse_interval_ms(ahead_text, key="max_ahead_of_clock", source=source)
        return cls(source, column, ticks_per_ms(time_type), lo, hi, future, text, ahead, ahead_text)

    def _clock_limit(self) -> int | None:
        """The largest plausible event time now (ticks), or None when unbounded."""
        if self.max_ahead_ms is None:
            return None
        return (wall_ms() + self.max_ahead_ms) * self.ticks_per_ms

    @property
    def range_text(self) -> str:
        return _fmt_range(self.lo_ms, self.hi_ms)

    def _value_text(self, values: pa.Array, ms: np.ndarray) -> pa.Array:
        if not pa.types.is_timestamp(values.type):
            return pc.cast(values, pa.string())
        return dateless_text(values, ms)

    def surely_fine(self, low: int, high: int, max_ts: int) -> bool:
        """True when no row with event times in ``[low, high]`` (ticks) can be refused: the
        latency path of one-row inserts skips ``check`` then."""
        tpm = self.ticks_per_ms
        if self.lo_ms is not None and low < self.lo_ms * tpm:
            return False
        if self.hi_ms is not None and high >= self.hi_ms * tpm:
            return False
        limit = self._clock_limit()
        if limit is not None and high > limit:
            return False
        if self.max_future_ms is None:
            return True
        # the running max only grows from max_ts, so rows within max_future of it all pass
        return max_ts != _NO_MAX and high - max_ts <= self.max_future_ms * tpm

    def check(self, values: pa.Array, refused: np.ndarray,
              max_ts: int) -> tuple[np.ndarray, pa.Array, np.ndarray]:
        """Rows of ``values`` (the converted time column) to refuse, beyond ``refused``:
        (mask, reason per row, LDB code per row)."""
        n = len(values)
        ticks = numeric_view(values)
        ok = ~refused
        if values.null_count:
            ok &= np.asarray(values.is_valid().to_numpy(zero_copy_only=False), bool)
        bad = np.zeros(n, bool)
        reasons = pa.nulls(n, pa.string())
        codes = np.zeros(n, np.int16)
        lo = None if self.lo_ms is None else self.lo_ms * self.ticks_per_ms
        hi = None if self.hi_ms is None else self.hi_ms * self.ticks_per_ms
        if lo is not None or hi is not None:
            out = np.zeros(n, bool)
            if lo is not None:
                out |= ticks < lo
            if hi is not None:
                out |= ticks >= hi
            out &= ok
            if out.any():
                ms = ticks / self.ticks_per_ms
                lo_ms = DEFAULT_RANGE_MS[0] if self.lo_ms is None else self.lo_ms
                hi_ms = DEFAULT_RANGE_MS[1] if self.hi_ms is None else self.hi_ms
                hint = pc.fill_null(unit_hints(ms, lo_ms, hi_ms), "")
                why = pc.binary_join_element_wise(
                    f"column {self.column!r}: ", self._value_text(values, ms),
                    f" is outside the event-time range {self.range_text} (source option event_time_range)",
                    hint, "")
                reasons = pc.if_else(pa.array(out), why, reasons)
                bad |= out
                codes[out] = CODE_RANGE
                ok &= ~out
        now = wall_ms()
        limit = None if self.max_ahead_ms is None else (now + self.max_ahead_ms) * self.ticks_per_ms
        if limit is not None and ok.any():
            ahead = ok & (ticks > limit)
            if ahead.any():
                why = pc.binary_join_element_wise(
                    f"column {self.column!r}: ", self._value_text(values, ticks / self.ticks_per_ms),
                    f" is more than {self.max_ahead_text} ahead of the clock (now "
                    f"{_fmt_instant(now)}): a producer's clock or date "
                    "is wrong, and accepting it would make every later row late (source option "
                    f"max_ahead_of_clock = '{self.max_ahead_text}'; 'off' for simulated future data)", "")
                reasons = pc.if_else(pa.array(ahead), why, reasons)
                bad |= ahead
                codes[ahead] = CODE_FUTURE
                ok &= ~ahead
        if self.max_future_ms is not None and ok.any():
            limit = self.max_future_ms * self.ticks_per_ms
            ahead, before = _future_kernel(np.ascontiguousarray(ticks, np.int64), ok, int(max_ts), limit, _NO_MAX)
            if ahead.any():
                gap = (ticks - before) / self.ticks_per_ms
                why = pc.binary_join_element_wise(
                    f"column {self.column!r}: ", self._value_text(values, ticks / self.ticks_per_ms),
                    " is ", pc.cast(pa.array(gap.astype(np.int64)), pa.string()),
                    f" ms ahead of the source's max event time so far (max_future = {self.max_future_text})",
                    "")
                reasons = pc.if_else(pa.array(ahead), why, reasons)
                bad |= ahead
                codes[ahead] = CODE_FUTURE
        return bad, reasons, codes

    def check_watermark(self, wm_ticks: int) -> tuple[str, str] | None:
        """(LDB code, why) when an explicit watermark is implausible, else None."""
        lo = None if self.lo_ms is None else self.lo_ms * self.ticks_per_ms
        hi = None if self.hi_ms is None else self.hi_ms * self.ticks_per_ms
        if (lo is not None and wm_ticks < lo) or (hi is not None and wm_ticks >= hi):
            hint = unit_hints(np.array([wm_ticks / self.ticks_per_ms]), *(
                DEFAULT_RANGE_MS[0] if self.lo_ms is None else self.lo_ms,
                DEFAULT_RANGE_MS[1] if self.hi_ms is None else self.hi_ms))[0].as_py() or ""
            return "LDB-2004", (f"watermark {wm_ticks} of source {self.source!r} is outside its event-time "
                                f"range {self.range_text}{hint}")
        limit = self._clock_limit()
        if limit is not None and wm_ticks > limit:
            return "LDB-2005", (f"watermark {wm_ticks} of source {self.source!r} is more than "
                                f"{self.max_ahead_text} ahead of the clock: every later row would be late "
                                "(source option max_ahead_of_clock; 'off' for simulated future data)")
        return None
