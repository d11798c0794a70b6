"""``connect("ray://host:port")`` asks Ray Client again when its server is slow to start on a
loaded head (both ways Ray reports it), and raises at once on anything else."""

from __future__ import annotations

import pytest

from laminardb.cluster import ray_env


class _FakeRay:
    """``ray.init`` failing with the given errors, then succeeding."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors, self.calls = list(errors), 0

    def init(self, **_kwargs) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch) -> None:
    monkeypatch.setattr(ray_env.time, "sleep", lambda _s: None)


def test_a_slow_client_server_is_asked_again() -> None:
    ray = _FakeRay([ConnectionError("ray client connection timeout"),
                    ConnectionAbortedError("Init Failure: Starting Ray client server failed. See ...")])
    ray_env._init_ray_client(ray, "ray://127.0.0.1:10001")
    assert ray.calls == 3


def test_the_last_try_and_other_errors_raise() -> None:
    ray = _FakeRay([ConnectionError("ray client connection timeout")] * 3)
    with pytest.raises(ConnectionError, match="timeout"):
        ray_env._init_ray_client(ray, "ray://127.0.0.1:10001")
    assert ray.calls == 3
    other = _FakeRay([ConnectionError("permission denied")])
    with pytest.raises(ConnectionError, match="permission"):
        ray_env._init_ray_client(other, "ray://127.0.0.1:10001")
    assert other.calls == 1
