"""What a polled source connector (Kafka, datagen, a filesystem table) gives the engine.

A polled source has ``poll(timeout_ms) -> (batch | None, watermark)``; ``FROM_DATA`` as the
watermark means "none of its own: the watermark follows the batch's max event time" (the
reactor's ``ingest()`` reads it so). It is defined here, below the engine, so that connectors
need not import the engine to say it.
"""

from __future__ import annotations

__all__ = ["FROM_DATA"]

FROM_DATA = object()  # ingest(): the watermark follows the batch's max event time
