"""What the Kafka source and sinks share: reading their options, reaching the brokers.

Used by :mod:`laminardb.connectors.kafka` (the source) and :mod:`laminardb.connectors.kafka_sink`
(the at-least-once and exactly-once sinks); a module of its own so that neither imports the
other.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from laminardb.connectors.exceptions import KafkaConfigError, KafkaUnavailableError

__all__: list[str] = []

# Producer batching: a few ms of linger fills batches of ~10k small messages at full speed
# and adds at most that much latency when the stream is slow.
LINGER_MS = 5
BATCH_BYTES = 1 << 20


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while kafka-python builds one Python object per
    record: those objects hold no cycles (refcounting frees them), yet allocating ~10^5 of them
    triggers full collections that cost about half the consume time (bench_kafka: 79k → 142k
    events/s). Re-enabled only if it was enabled on entry, so nested or concurrent use never
    leaves it off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def option_value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def passthrough(options: dict[str, str]) -> dict[str, Any]:
    """``kafka.fetch.max.wait.ms = '50'`` → ``{"fetch_max_wait_ms": 50}`` for kafka-python."""
    return {k[len("kafka."):].replace(".", "_"): option_value(str(v))
            for k, v in options.items() if k.startswith("kafka.")}


def choice(options: dict[str, str], names: tuple[str, ...], allowed: tuple[str, ...],
           default: str, what: str) -> str:
    """The value of the first of ``names`` (spellings of one option) that is set, checked
    against ``allowed``."""
    for name in names:
        if options.get(name):
            value = str(options[name]).strip().lower().replace("_", "-")
            if value not in allowed:
                msg = (f"{what}: {name} = {options[name]!r} is not supported; use "
                       f"{' or '.join(repr(a) for a in allowed)}")
                raise KafkaConfigError(msg)
            return value
    return default


def require(options: dict[str, str], name: str, what: str) -> str:
    value = options.get(name)
    if not value:
        msg = f"Kafka {what} needs option {name!r}: add {name} = '…' to its FROM/INTO KAFKA (…)"
        raise KafkaConfigError(msg)
    return str(value)


def int_option(options: dict[str, str], name: str, default: int) -> int:
    try:
        return int(options.get(name, default))
    except (TypeError, ValueError):
        msg = f"Kafka option {name} = {options[name]!r} is not an integer: write e.g. {name} = '{default}'"
        raise KafkaConfigError(msg) from None


def brokers_list(brokers: str) -> list[str]:
    return [b.strip() for b in brokers.split(",") if b.strip()]


def unavailable(brokers: str, exc: BaseException) -> KafkaUnavailableError:
    return KafkaUnavailableError(
        f"cannot reach Kafka at {brokers!r}: {exc}; check the brokers option and that the "
        "broker is running")


def ensure_topic(brokers: list[str], topic: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=brokers, client_id="laminardb-admin")
    try:
        if topic not in admin.list_topics():
            try:
                admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                              replication_factor=1)])
            except TopicAlreadyExistsError:
                pass  # created concurrently
    finally:
        admin.close()
