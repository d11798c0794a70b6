"""``SharedIpc``: the head encodes a batch its subscribers share once (unit test of the cache)."""

from __future__ import annotations

import pyarrow as pa

from laminardb.cluster.wire import SharedIpc, from_ipc


def test_a_batch_is_encoded_once_while_cached_and_equal_to_its_rows():
    encode = SharedIpc(size=2)
    a, b, c = (pa.record_batch({"k": [i, i + 1], "s": ["x" * i, None]}) for i in range(3))
    first = encode(a)
    assert encode(a) is first  # a second subscriber of the same batch: no second encode
    assert from_ipc(first).equals(a)
    encode(b)
    encode(c)  # a fell out of the cache (size 2): encoded again, same rows
    again = encode(a)
    assert again is not first and from_ipc(again).equals(a)
    equal_rows = pa.record_batch({"k": [0, 1], "s": ["", None]})
    assert encode(equal_rows) is not encode(a)  # another object: never served from a's bytes
