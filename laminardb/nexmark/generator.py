"""A deterministic, vectorized Nexmark event generator: the ``person``, ``auction`` and ``bid``
streams as Arrow record batches.

Entry points: :func:`generate` (``(stream, RecordBatch)`` pairs in event-time order),
:func:`tables` (every row of each stream, for an oracle) and :class:`NexmarkConfig` (the
generator's knobs, defaults from Nexmark's ``NexmarkConfiguration``).

It follows the Java generator of the reference implementation (nexmark/nexmark,
``nexmark-flink/src/main/java/com/github/nexmark/flink/generator/``) event by event in *shape*:

* event ``n`` (0-based) is a person when ``n % 50 == 0``, an auction when ``n % 50`` is 1–3 and a
  bid otherwise (person 1 : auction 3 : bid 46); its event time is
  ``base_time + floor(n * 1e6 / rate) // 1000`` ms (``GeneratorConfig.timestampForEvent`` with
  ``outOfOrderGroupSize = 1``), so every stream is in event-time order;
* ids: person ``1000 + n // 50``, auction ``1000 + 3 * (n // 50) + (n % 50 − 1)``
  (``lastBase0PersonId`` / ``lastBase0AuctionId``), categories 10–14;
* an auction's seller is a hot seller (the first of the last block of 100 people) with
  probability 3/4, else one of the last 1,000 active people (+ up to 10 ids ahead); its
  ``expires`` is ``dateTime`` + 1 … 2 × the time until 100 more auctions exist;
* a bid's auction is a hot auction (the first of the last block of 100 auctions) with
  probability 1/2, else one of the last 100 in-flight auctions (+ up to 10 ids ahead); its
  bidder is a hot bidder (the second of the last block of 100 people) with probability 3/4,
  else an active person; prices are ``round(10 ** (6u) * 100)``; channels are one of 4 hot
  channels (half the bids) or one of 10,000 ``channel-i`` with their URLs (90 % of which carry
  ``&channel_id=…``); the strings (names, e-mails, credit cards, cities, states, URLs) have
  Nexmark's forms and ``extra`` pads each row to Nexmark's average sizes (person 200,
  auction 500, bid 100 bytes).

What differs from the Java generator (the rows are not byte-identical to it):

* randomness is numpy's PCG64 seeded by ``(seed, block)`` for blocks of ``_BLOCK`` events, not
  ``SplittableRandom`` — the rows depend on the seed and never on ``batch_events``;
* the Java generator adds ``FIRST_PERSON_ID`` to a bid's bidder twice (bidders are then 1000
  ids above any person); here it is added once, so bidders are person ids;
* ``extra``, ``itemName``, ``description`` and e-mail parts are consecutive slices of a
  reusable random text (the Java generator takes random slices of one for ``extra``);
* ``lead=False`` turns off the "up to 10 ids ahead" leads, so that every reference is to a
  person or auction generated earlier (Nexmark's leads make a few references point a little
  into the future, to mimic events swapped in time);
* event time starts at a fixed ``base_time`` (not the wall clock) and the rate is constant.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["NexmarkConfig", "Stream", "SCHEMAS", "generate", "tables", "stream_counts"]

Stream = Literal["person", "auction", "bid"]

# Nexmark's constants (GeneratorConfig, PersonGenerator, AuctionGenerator, BidGenerator).
_FIRST_PERSON_ID = 1000
_FIRST_AUCTION_ID = 1000
_FIRST_CATEGORY_ID = 10
_NUM_CATEGORIES = 5
_ID_LEAD = 10  # PERSON_ID_LEAD, AUCTION_ID_LEAD: ids up to this far ahead may be referenced
_HOT_RATIO = 100  # HOT_SELLER_RATIO, HOT_AUCTION_RATIO, HOT_BIDDER_RATIO: hot ids are 1 in 100
_NUM_CHANNELS = 10_000
_HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
_US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
_US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
              "Seattle", "Kent", "Cheyenne")
_FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter",
                "Walter")
_LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")

# Randomness is drawn per block of this many events (a multiple of the 50-event epoch): large
# enough that numpy's per-call cost vanishes, small enough (≈ 10 MB of rows) to stay in cache-ish
# memory; the rows depend on it, so changing it changes every generated data set.
_BLOCK = 50_000
# The reusable random texts that string columns are sliced from, larger than one block needs:
# ``extra`` ≈ 46,000 bids × 81 + 3,000 auctions × 470 + 1,000 persons × 170 bytes ≈ 5.3 MB at most;
# names, descriptions and e-mails (the spaced text) ≈ 3,000 × 118 + 1,000 × 10 bytes ≈ 0.4 MB.
# Making them once costs ≈ 50 ms per generate() call.
_TEXT_BYTES = 8 << 20
_SPACED_TEXT_BYTES = 1 << 20
_TOTAL = 50

SCHEMAS: dict[str, pa.Schema] = {
    "person": pa.schema([
        ("id", pa.int64()), ("name", pa.string()), ("emailAddress", pa.string()),
        ("creditCard", pa.string()), ("city", pa.string()), ("state", pa.string()),
        ("dateTime", pa.timestamp("ms")), ("extra", pa.string()),
    ]),
    "auction": pa.schema([
        ("id", pa.int64()), ("itemName", pa.string()), ("description", pa.string()),
        ("initialBid", pa.int64()), ("reserve", pa.int64()), ("dateTime", pa.timestamp("ms")),
        ("expires", pa.timestamp("ms")), ("seller", pa.int64()), ("category", pa.int64()),
        ("extra", pa.string()),
    ]),
    "bid": pa.schema([
        ("auction", pa.int64()), ("bidder", pa.int64()), ("price", pa.int64()),
        ("channel", pa.string()), ("url", pa.string()), ("dateTime", pa.timestamp("ms")),
        ("extra", pa.string()),
    ]),
}

# event offsets within the 50-event epoch of each stream: [lo, hi)
_SLOTS: dict[str, tuple[int, int]] = {"person": (0, 1), "auction": (1, 4), "bid": (4, 50)}


@dataclass(frozen=True)
class NexmarkConfig:
    """The generator's knobs; defaults are Nexmark's (``NexmarkConfiguration``) and the event
    rate of its published benchmark runs (``nexmark.workload.suite.100m.tps`` = 10M events/s)."""

    rate: float = 10_000_000.0  # events per second of event time (firstEventRate)
    base_time: int = 1_700_000_000_000  # event time of event 0, epoch ms
    lead: bool = True  # references may point up to 10 ids ahead, as in Nexmark
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    avg_person_bytes: int = 200
    avg_auction_bytes: int = 500
    avg_bid_bytes: int = 100


def stream_counts(events: int) -> dict[str, int]:
    """How many rows of each stream the first ``events`` events hold."""
    return {s: _count(events, lo, hi) for s, (lo, hi) in _SLOTS.items()}


def _count(n: int, lo: int, hi: int) -> int:
    return (n // _TOTAL) * (hi - lo) + min(max(n % _TOTAL - lo, 0), hi - lo)


def generate(events: int, *, seed: int = 0, batch_events: int = 65_536,
             config: NexmarkConfig | None = None) -> Iterator[tuple[Stream, pa.RecordBatch]]:
    """Yield ``(stream, batch)`` for events ``0 … events − 1``: per range of ``batch_events``
    consecutive events, the range's persons, auctions and bids (empty ones left out).

    Each stream's ``dateTime`` never decreases across its batches; within a range the streams
    are yielded person, auction, bid, so two streams are at most one range apart in event time.
    The same ``(events, seed, config)`` gives the same rows whatever ``batch_events`` is.
    """
    if events < 0 or batch_events <= 0:
        raise ValueError(f"events must be ≥ 0 and batch_events > 0, got {events} and {batch_events}")
    gen = _Generator(seed, config or NexmarkConfig())
    for a in range(0, events, batch_events):
        b = min(a + batch_events, events)
        for stream in ("person", "auction", "bid"):
            batch = gen.rows(stream, a, b, events)
            if batch.num_rows:
                yield stream, batch  # type: ignore[misc]


def tables(events: int, *, seed: int = 0, config: NexmarkConfig | None = None) -> dict[str, pa.Table]:
    """Every row of each stream as one table (what :func:`generate` yields, concatenated)."""
    parts: dict[str, list[pa.RecordBatch]] = {s: [] for s in SCHEMAS}
    for stream, batch in generate(events, seed=seed, batch_events=_BLOCK * 4, config=config):
        parts[stream].append(batch)
    return {s: pa.Table.from_batches(parts[s], schema=SCHEMAS[s]) for s in SCHEMAS}


class _Generator:
    """Blocks of ``_BLOCK`` events, generated on demand (the last one cached) and sliced."""

    def __init__(self, seed: int, config: NexmarkConfig) -> None:
        self.seed, self.cfg = seed, config
        fixed = np.random.default_rng([seed, 0x6E78])  # seed-wide constants: texts, channel URLs
        self.text = _random_text(fixed, _TEXT_BYTES, special=None)
        self.spaced = _random_text(fixed, _SPACED_TEXT_BYTES, special=ord(" "))
        urls = _base_urls(fixed, len(_HOT_CHANNELS) + _NUM_CHANNELS)
        with_id = fixed.integers(0, 10, _NUM_CHANNELS) > 0  # 9 in 10 channel URLs carry an id
        for i in np.flatnonzero(with_id):
            urls[len(_HOT_CHANNELS) + i] += f"&channel_id={abs(_reverse32(int(i)))}"
        self.channels = pa.array(list(_HOT_CHANNELS) + [f"channel-{i}" for i in range(_NUM_CHANNELS)])
        self.urls = pa.array(urls)
        self.names = pa.array([f"{f} {last}" for f in _FIRST_NAMES for last in _LAST_NAMES])
        self.name_len = np.array([len(x) for x in self.names.to_pylist()], np.int64)
        self.cities = pa.array(_US_CITIES)
        self.city_len = np.array([len(x) for x in _US_CITIES], np.int64)
        self.states = pa.array(_US_STATES)
        self.delay_us = 1e6 / config.rate
        self.cached: dict[int, dict[str, pa.RecordBatch]] = {}

    def rows(self, stream: str, a: int, b: int, events: int) -> pa.RecordBatch:
        lo, hi = _SLOTS[stream]
        # ranges only move forward: blocks before this range's first are done with
        self.cached = {j: blk for j, blk in self.cached.items() if j >= a // _BLOCK}
        pieces = []
        for k in range(a // _BLOCK, (b - 1) // _BLOCK + 1):
            start = k * _BLOCK
            block = self.block(k, min(start + _BLOCK, events))[stream]
            first = _count(max(a, start), lo, hi) - _count(start, lo, hi)
            last = _count(min(b, start + _BLOCK), lo, hi) - _count(start, lo, hi)
            pieces.append(block.slice(first, last - first))
        return pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)

    def block(self, k: int, end: int) -> dict[str, pa.RecordBatch]:
        if k not in self.cached:
            self.cached[k] = self._make_block(k, end)
        return self.cached[k]

    # ------------------------------------------------------------------ one block
    def _ts(self, n: np.ndarray) -> np.ndarray:
        return self.cfg.base_time + np.floor(n * self.delay_us).astype(np.int64) // 1000

    def _make_block(self, k: int, end: int) -> dict[str, pa.RecordBatch]:
        rng = np.random.default_rng([self.seed, k + 1])
        n = np.arange(k * _BLOCK, end, dtype=np.int64)
        off = n % _TOTAL
        return {
            "person": self._persons(rng, n[off == 0]),
            "auction": self._auctions(rng, n[(off >= 1) & (off < 4)]),
            "bid": self._bids(rng, n[off >= 4]),
        }

    def _active_person(self, rng: np.random.Generator, epoch: np.ndarray) -> np.ndarray:
        """``nextBase0PersonId``: one of the last ``num_active_people`` people (+ the lead)."""
        num_people = epoch + 1  # lastBase0PersonId + 1 (one person per epoch)
        active = np.minimum(num_people, self.cfg.num_active_people)
        span = active + (_ID_LEAD if self.cfg.lead else 0)
        pick = (rng.random(len(epoch)) * span).astype(np.int64)
        return num_people - active + pick

    def _persons(self, rng: np.random.Generator, n: np.ndarray) -> pa.RecordBatch:
        m = len(n)
        name_idx = rng.integers(0, len(self.names), m)
        user, user_len = self._string(rng, m, 7)
        host, host_len = self._string(rng, m, 5)
        email = pc.binary_join_element_wise(user, host, pa.scalar("@")).cast(pa.string())
        email = pc.binary_join_element_wise(email, pa.scalar(".com"), pa.scalar(""))
        cards = rng.integers(0, 10_000, (m, 4))
        city_idx = rng.integers(0, len(_US_CITIES), m)
        size = 8 + self.name_len[name_idx] + user_len + host_len + 5 + 19 + self.city_len[city_idx] + 2
        return pa.record_batch([
            pa.array(n // _TOTAL + _FIRST_PERSON_ID, pa.int64()),
            self.names.take(pa.array(name_idx)),
            email,
            _credit_cards(cards),
            self.cities.take(pa.array(city_idx)),
            self.states.take(pa.array(rng.integers(0, len(_US_STATES), m))),
            pa.array(self._ts(n), pa.timestamp("ms")),
            self._extra(rng, size, self.cfg.avg_person_bytes),
        ], schema=SCHEMAS["person"])

    def _auctions(self, rng: np.random.Generator, n: np.ndarray) -> pa.RecordBatch:
        m, cfg = len(n), self.cfg
        epoch = n // _TOTAL
        last_auction = epoch * 3 + (n % _TOTAL - 1)
        hot = rng.random(m) * cfg.hot_sellers_ratio >= 1  # nextInt(ratio) > 0
        seller = np.where(hot, (epoch // _HOT_RATIO) * _HOT_RATIO, self._active_person(rng, epoch))
        ts = self._ts(n)
        ahead = (cfg.num_in_flight_auctions * _TOTAL) // 3  # events until 100 more auctions exist
        horizon = np.maximum((self._ts(n + ahead) - ts) * 2, 1)
        expires = ts + 1 + (rng.random(m) * horizon).astype(np.int64)
        initial = _prices(rng, m)
        reserve = initial + _prices(rng, m)
        item, item_len = self._string(rng, m, 20)
        desc, desc_len = self._string(rng, m, 100)
        return pa.record_batch([
            pa.array(last_auction + _FIRST_AUCTION_ID, pa.int64()),
            item, desc,
            pa.array(initial, pa.int64()), pa.array(reserve, pa.int64()),
            pa.array(ts, pa.timestamp("ms")), pa.array(expires, pa.timestamp("ms")),
            pa.array(seller + _FIRST_PERSON_ID, pa.int64()),
            pa.array(_FIRST_CATEGORY_ID + rng.integers(0, _NUM_CATEGORIES, m), pa.int64()),
            self._extra(rng, 8 + item_len + desc_len + 40, cfg.avg_auction_bytes),
        ], schema=SCHEMAS["auction"])

    def _bids(self, rng: np.random.Generator, n: np.ndarray) -> pa.RecordBatch:
        m, cfg = len(n), self.cfg
        epoch = n // _TOTAL
        last_auction = epoch * 3 + 2  # the epoch's auctions all precede its bids
        hot_a = rng.random(m) * cfg.hot_auction_ratio >= 1
        lo = np.maximum(last_auction - cfg.num_in_flight_auctions, 0)
        span = last_auction - lo + 1 + (_ID_LEAD if cfg.lead else 0)
        auction = np.where(hot_a, (last_auction // _HOT_RATIO) * _HOT_RATIO,
                           lo + (rng.random(m) * span).astype(np.int64))
        hot_b = rng.random(m) * cfg.hot_bidders_ratio >= 1
        bidder = np.where(hot_b, (epoch // _HOT_RATIO) * _HOT_RATIO + 1, self._active_person(rng, epoch))
        if not cfg.lead:  # the hot bidder (second of its block of 100) may not exist yet
            bidder = np.minimum(bidder, epoch)
        hot_c = rng.random(m) < 0.5
        channel = np.where(hot_c, rng.integers(0, len(_HOT_CHANNELS), m),
                           len(_HOT_CHANNELS) + rng.integers(0, _NUM_CHANNELS, m))
        channel_idx = pa.array(channel)
        return pa.record_batch([
            pa.array(auction + _FIRST_AUCTION_ID, pa.int64()),
            pa.array(bidder + _FIRST_PERSON_ID, pa.int64()),
            pa.array(_prices(rng, m), pa.int64()),
            self.channels.take(channel_idx),
            self.urls.take(channel_idx),
            pa.array(self._ts(n), pa.timestamp("ms")),
            self._extra(rng, np.full(m, 32, np.int64), cfg.avg_bid_bytes),
        ], schema=SCHEMAS["bid"])

    # ------------------------------------------------------------------ strings
    def _string(self, rng: np.random.Generator, m: int, max_len: int) -> tuple[pa.Array, np.ndarray]:
        """``StringsGenerator.nextString``: 3 … max_len − 1 letters (1 in 13 a space), trimmed."""
        lengths = rng.integers(3, max_len, m)
        arr = pc.utf8_trim_whitespace(self._slices(rng, self.spaced, lengths))
        return arr, pc.binary_length(arr).to_numpy(zero_copy_only=False).astype(np.int64)

    def _extra(self, rng: np.random.Generator, current: np.ndarray, avg: int) -> pa.Array:
        """``StringsGenerator.nextExtra``: pad each row to ``avg`` bytes on average (± 20 %)."""
        want = np.maximum(avg - current, 0)
        delta = np.round(want * 0.2).astype(np.int64)
        lengths = want - delta + (rng.random(len(want)) * 2 * delta).astype(np.int64)
        return self._slices(rng, self.text, lengths)

    @staticmethod
    def _slices(rng: np.random.Generator, text: pa.Buffer, lengths: np.ndarray) -> pa.Array:
        """Consecutive slices of ``text`` of these lengths, from a random start: zero-copy."""
        offsets = np.zeros(len(lengths) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        if total > text.size:
            raise ValueError(f"a block needs {total} bytes of text, more than the {text.size} made")
        start = int(rng.integers(0, text.size - total + 1))
        return pa.StringArray.from_buffers(len(lengths), pa.py_buffer(offsets), text.slice(start, total))


def _random_text(rng: np.random.Generator, size: int, special: int | None) -> pa.Buffer:
    if special is None:
        return pa.py_buffer((rng.integers(0, 26, size, dtype=np.uint8) + ord("a")).tobytes())
    x = rng.integers(0, 26 * 13, size, dtype=np.uint16)  # 1 in 13 is the special character
    return pa.py_buffer(np.where(x < 26, special, ord("a") + x % 26).astype(np.uint8).tobytes())


def _prices(rng: np.random.Generator, m: int) -> np.ndarray:
    """``PriceGenerator.nextPrice``: log-uniform between 100 and 100,000,000 cents."""
    return np.round(10.0 ** (rng.random(m) * 6.0) * 100.0).astype(np.int64)


def _credit_cards(groups: np.ndarray) -> pa.Array:
    """Four 4-digit groups, ``"dddd dddd dddd dddd"``, built as one 19-byte-per-row buffer."""
    m = len(groups)
    out = np.full((m, 19), ord(" "), np.uint8)
    for g in range(4):
        for d in range(4):
            out[:, g * 5 + d] = ord("0") + (groups[:, g] // 10 ** (3 - d)) % 10
    offsets = np.arange(0, 19 * (m + 1), 19, dtype=np.int32)
    return pa.StringArray.from_buffers(m, pa.py_buffer(offsets), pa.py_buffer(out.tobytes()))


def _base_urls(rng: np.random.Generator, count: int) -> list[str]:
    """``BidGenerator.getBaseUrl``: three 3–4 letter path parts (1 in 13 letters an ``_``)."""
    lengths = rng.integers(3, 5, 3 * count)
    x = rng.integers(0, 26 * 13, int(lengths.sum()))
    text = np.where(x < 26, ord("_"), ord("a") + x % 26).astype(np.uint8).tobytes().decode()
    ends = np.cumsum(lengths).tolist()
    parts = [text[e - n : e] for e, n in zip(ends, lengths.tolist(), strict=True)]
    return [f"https://www.nexmark.com/{parts[3 * i]}/{parts[3 * i + 1]}/{parts[3 * i + 2]}/item.htm?query=1"
            for i in range(count)]


def _reverse32(i: int) -> int:
    """Java's ``Integer.reverse``: the 32 bits of ``i`` reversed, as a signed int."""
    r = int(f"{i & 0xFFFFFFFF:032b}"[::-1], 2)
    return r - (1 << 32) if r >= 1 << 31 else r
