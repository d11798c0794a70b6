"""Live market-data demo: ``laminardb demo`` (entry point :func:`run_demo`).

A synthetic trade feed (random-walk prices per symbol, event-time timestamps with a little
out-of-order jitter inside the watermark delay) is generated with numpy, one batch every
``_TICK_S``, and inserted into an embedded engine running:

* ``bars`` — 1-second OHLC/VWAP bars per symbol (tumbling window, EMIT ON WINDOW CLOSE),
  read through a subscription;
* ``totals`` — a materialized view of trades, volume and notional per symbol (EMIT CHANGES),
  read with ``query()``.

On a terminal the board is redrawn a few times per second with ANSI colours; otherwise
(a pipe, a log, CI) a plain snapshot is printed every couple of seconds. Ctrl-C or the end of
``--seconds`` finishes the engine (every open window is emitted) and prints a summary.
"""

from __future__ import annotations

import collections
import shutil
import sys
import time
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["DEMO_SQL", "MarketGenerator", "run_demo"]

DEMO_SQL = """
CREATE SOURCE trades (
    ts TIMESTAMP(3) NOT NULL, symbol VARCHAR, price DOUBLE, qty BIGINT,
    WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
);
CREATE STREAM bars AS
    SELECT symbol, window_start, window_end,
           first_value(price) AS open, max(price) AS high, min(price) AS low,
           last_value(price) AS close, sum(price * qty) / sum(qty) AS vwap, sum(qty) AS volume
    FROM trades GROUP BY symbol, tumble(ts, INTERVAL '1' SECOND);
CREATE MATERIALIZED VIEW totals AS
    SELECT symbol, count(*) AS trades, sum(qty) AS volume, sum(price * qty) AS notional
    FROM trades GROUP BY symbol;
"""

_TICKERS = (("LMNR", 184.20), ("DLTA", 92.50), ("ARRW", 41.25), ("VNOD", 256.00),
            ("RAFT", 17.80), ("NUMB", 63.30), ("SQLG", 128.00), ("RAYS", 8.75),
            ("WAVE", 311.00), ("FLUX", 55.50), ("EPOC", 142.00), ("SINK", 23.40))
# One insert every 50 ms: 20 batches/s keeps ingest smooth without per-batch overhead dominating.
_TICK_S = 0.05
# Terminal redraws per second (4) and seconds between plain snapshots when not a terminal.
_FRAME_S = 0.25
_SNAPSHOT_S = 2.0
# Out-of-order jitter stays below the 1 s watermark delay, so no trade is ever late.
_JITTER_MS = 700
_SPARK = "▁▂▃▄▅▆▇█"
_SPARK_LEN = 30
# Visible columns up to the end of the totals section and of the bar section.
_TOTALS_END, _BAR_END = 63, 124
_GREEN, _RED, _DIM, _BOLD, _CYAN, _RESET = (
    "\x1b[32m", "\x1b[31m", "\x1b[2m", "\x1b[1m", "\x1b[36m", "\x1b[0m")


class MarketGenerator:
    """Random-walk trades for a few symbols, generated vectorized in batches."""

    def __init__(self, symbols: int = 6, rate: float = 2000.0, seed: int | None = None) -> None:
        k = max(1, min(symbols, len(_TICKERS)))
        self.rng = np.random.default_rng(seed)
        self.names = [name for name, _ in _TICKERS[:k]]
        self.prices = np.array([price for _, price in _TICKERS[:k]])
        self.rate = rate
        self._names = pa.array(self.names)
        self._sigma = self.rng.uniform(3e-5, 1.2e-4, k)  # per-trade log-return volatility
        weights = 1.0 / np.sqrt(np.arange(1, k + 1))  # a few busy symbols, some quiet ones
        self._weights = weights / weights.sum()

    def batch(self, t0_ms: int, t1_ms: int) -> pa.RecordBatch | None:
        """The trades of event-time interval [t0_ms, t1_ms), or None when there are none."""
        n = int(self.rng.poisson(self.rate * (t1_ms - t0_ms) / 1000.0))
        if n == 0:
            return None
        rng = self.rng
        sym = rng.choice(len(self.names), size=n, p=self._weights)
        steps = rng.normal(0.0, self._sigma[sym])
        # Cumulative log-return per symbol, in trade order: sort by symbol (stable), cumsum,
        # subtract each group's offset, scatter back.
        order = np.argsort(sym, kind="stable")
        s_sym, s_steps = sym[order], steps[order]
        csum = np.cumsum(s_steps)
        starts = np.r_[0, np.flatnonzero(np.diff(s_sym)) + 1]
        sizes = np.diff(np.r_[starts, n])
        walk = csum - np.repeat(csum[starts] - s_steps[starts], sizes)
        s_price = np.round(self.prices[s_sym] * np.exp(walk), 2)
        ends = starts + sizes - 1
        self.prices[s_sym[ends]] = s_price[ends]
        price = np.empty(n)
        price[order] = s_price
        ts = np.sort(rng.uniform(t0_ms, t1_ms, n)).astype(np.int64)
        late = rng.random(n) < 0.1  # one trade in ten arrives a little out of order
        ts[late] -= rng.integers(0, _JITTER_MS, int(late.sum()))
        qty = (np.floor(rng.pareto(2.5, n) * 3) + 1).astype(np.int64) * 100
        return pa.record_batch({
            "ts": pa.array(ts, pa.timestamp("ms")),
            "symbol": pc.take(self._names, pa.array(sym)),
            "price": pa.array(price),
            "qty": pa.array(qty),
        })


class _Board:
    """What the screen shows, updated from the generator, the bars stream and the view."""

    def __init__(self, gen: MarketGenerator, seconds: float, rate: float) -> None:
        self.gen, self.seconds, self.rate = gen, seconds, rate
        self.first = gen.prices.copy()
        self.shown = gen.prices.copy()
        self.direction = np.zeros(len(gen.names), int)
        self.closes: dict[str, collections.deque[float]] = {
            s: collections.deque(maxlen=_SPARK_LEN) for s in gen.names}
        self.last_bar: dict[str, tuple] = {}
        self.totals: dict[str, tuple] = {}
        self.metrics: dict[str, Any] = {}
        self.bars_seen = 0
        self.rates: collections.deque[tuple[float, int, int]] = collections.deque(maxlen=8)

    def add_bars(self, batch: pa.RecordBatch) -> None:
        # a handful of rows per second (one per symbol): fine to walk in Python for display
        for row in batch.to_pylist():
            bar = (row["window_end"], row["open"], row["high"], row["low"], row["close"],
                   row["volume"], row["vwap"])
            self.last_bar[row["symbol"]] = bar
            self.closes[row["symbol"]].append(row["close"])
        self.bars_seen += batch.num_rows

    def set_totals(self, table: pa.Table) -> None:
        for row in table.to_pylist():
            vwap = row["notional"] / row["volume"] if row["volume"] else float("nan")
            self.totals[row["symbol"]] = (row["trades"], row["volume"], vwap)

    def set_metrics(self, metrics: dict[str, Any]) -> None:
        self.metrics = metrics
        self.rates.append((time.monotonic(), metrics["events_ingested"], self.bars_seen))

    def tick_prices(self) -> None:
        now = self.gen.prices
        self.direction = np.sign(np.round(now - self.shown, 2)).astype(int)
        self.shown = now.copy()

    def _engine_line(self) -> str:
        m = self.metrics
        if len(self.rates) >= 2:
            (t0, e0, b0), (t1, e1, b1) = self.rates[0], self.rates[-1]
            ev_s, bars_s = (e1 - e0) / max(t1 - t0, 1e-9), (b1 - b0) / max(t1 - t0, 1e-9)
        else:
            ev_s = bars_s = 0.0
        wm = (m.get("watermarks") or {}).get("trades")
        lag = f"{(time.time() * 1000 - wm) / 1000:.2f} s" if wm is not None else "—"
        return (f"in {ev_s:,.0f} ev/s · out {bars_s:,.1f} bars/s · watermark lag {lag} · "
                f"late dropped {m.get('late_events_dropped', 0):,} · "
                f"ingested {m.get('events_ingested', 0):,} · emitted {m.get('events_emitted', 0):,}")

    def rows(self, color: bool) -> list[str]:
        def paint(text: str, code: str) -> str:
            return f"{code}{text}{_RESET}" if color else text

        width = shutil.get_terminal_size((160, 30)).columns
        # narrow terminals drop the sparkline, then the bar columns, instead of wrapping
        show_bar, spark_len = width >= _BAR_END, min(_SPARK_LEN, width - _BAR_END - 3)
        head = (f" {'SYMBOL':<6}     {'LAST':>9} {'CHG%':>7} {'VWAP':>9} {'TRADES':>8} "
                f"{'VOLUME':>10} │ {'BAR END':>8} {'OPEN':>9} {'HIGH':>9} {'LOW':>9} "
                f"{'CLOSE':>9} {'VOL':>8} │ CLOSES (1 s bars)")
        lines = [paint(head[:width if show_bar else _TOTALS_END].rstrip(" │"), _BOLD)]
        for i, sym in enumerate(self.gen.names):
            last, change = self.gen.prices[i], (self.gen.prices[i] / self.first[i] - 1) * 100
            arrow = {1: paint("▲", _GREEN), -1: paint("▼", _RED)}.get(self.direction[i],
                                                                     paint("·", _DIM))
            trades, volume, vwap = self.totals.get(sym, (0, 0, float("nan")))
            chg = paint(f"{change:+6.2f}%", _GREEN if change >= 0 else _RED)
            text = (f" {paint(f'{sym:<6}', _CYAN)} {arrow}  {last:9.2f} {chg} {vwap:9.2f} "
                    f"{trades:8,} {volume:10,} │ ")
            bar = self.last_bar.get(sym)
            if not show_bar:
                lines.append(text.rstrip(" │"))
                continue
            if bar:
                end, o, h, lo, c, v, _ = bar
                bar_color = _GREEN if c >= o else _RED
                text += (f"{end:%H:%M:%S} {o:9.2f} {h:9.2f} {lo:9.2f} "
                         f"{paint(f'{c:9.2f}', bar_color)} {v:8,} │ ")
            else:
                text += f"{'(first bar closes after ~2 s)':<55} │ "
            closes = list(self.closes[sym])[-spark_len:] if spark_len >= 5 else []
            if len(closes) >= 2:
                text += paint(_sparkline(closes), _GREEN if closes[-1] >= closes[0] else _RED)
            lines.append(text)
        lines.append("")
        lines.append(" " + paint("engine", _BOLD) + "  " + self._engine_line())
        return lines


def _sparkline(values: Any) -> str:
    v = np.asarray(values, dtype=float)
    lo, hi = v.min(), v.max()
    if hi - lo < 1e-12:
        return _SPARK[3] * len(v)
    idx = np.round((v - lo) / (hi - lo) * (len(_SPARK) - 1)).astype(int)
    return "".join(_SPARK[i] for i in idx)


def _drain(sub: Any, board: _Board) -> None:
    while (batch := sub.try_next()) is not None:
        board.add_bars(batch)


def _refresh(conn: Any, board: _Board) -> None:
    board.set_totals(conn.query("SELECT symbol, trades, volume, notional FROM totals").to_arrow())
    board.set_metrics(conn.metrics())
    board.tick_prices()


def _title(board: _Board, elapsed: float, color: bool) -> str:
    name = f"{_BOLD}laminardb demo{_RESET}" if color else "laminardb demo"
    return (f" {name} · {len(board.gen.names)} symbols · {board.rate:,.0f} trades/s · "
            f"{elapsed:5.1f} s / {board.seconds:g} s · Ctrl-C to stop")


def run_demo(*, seconds: float = 30.0, symbols: int = 6, rate: float = 2000.0,
             seed: int | None = None, out: TextIO | None = None) -> int:
    """Run the live demo for ``seconds`` (or until Ctrl-C); returns the exit status (0)."""
    import laminardb

    out = out or sys.stdout
    tty = hasattr(out, "isatty") and out.isatty()
    gen = MarketGenerator(symbols, rate, seed)
    board = _Board(gen, seconds, rate)
    conn = laminardb.open()
    interrupted = False
    try:
        conn.execute(DEMO_SQL)
        bars = conn.subscribe_stream("bars", history_rows=0)
        conn.start()
        if tty:
            out.write("\x1b[?25l\x1b[2J")  # hide the cursor, clear the screen
        start = next_tick = time.monotonic()
        next_frame, last_ms = start, int(time.time() * 1000)
        try:
            while (elapsed := time.monotonic() - start) < seconds:
                now_ms = int(time.time() * 1000)
                batch = gen.batch(last_ms, now_ms)
                last_ms = now_ms
                if batch is not None:
                    conn.insert("trades", batch)
                _drain(bars, board)
                if time.monotonic() >= next_frame:
                    _refresh(conn, board)
                    if tty:
                        frame = [_title(board, elapsed, True), ""] + board.rows(True)
                        out.write("\x1b[H" + "".join(f"{line}\x1b[K\n" for line in frame) + "\x1b[J")
                    else:
                        out.write("\n".join([_title(board, elapsed, False)] + board.rows(False)))
                        out.write("\n\n")
                    out.flush()
                    next_frame += _FRAME_S if tty else _SNAPSHOT_S
                next_tick += _TICK_S
                time.sleep(max(0.0, next_tick - time.monotonic()))
        except KeyboardInterrupt:
            interrupted = True
        conn.finish()  # end of input: every open window closes and is emitted
        _drain(bars, board)
        _refresh(conn, board)
        if tty:
            out.write("\x1b[H\x1b[J")
        lines = [_title(board, time.monotonic() - start, tty)] + board.rows(tty)
        out.write("\n".join(lines) + "\n")
        m = board.metrics
        stopped = "interrupted" if interrupted else "done"
        out.write(f"\n{stopped}: {m['events_ingested']:,} trades in, {board.bars_seen:,} bars out, "
                  f"{m['late_events_dropped']:,} late.\n")
        out.flush()
    finally:
        if tty:
            out.write("\x1b[?25h")  # show the cursor again
            out.flush()
        conn.close()
    return 0
