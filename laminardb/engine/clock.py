"""The connection's processing-time clock: ``ProcessingClock`` lives in ``laminardb/sql/clock.py``
(``PROCTIME()`` reads it while a query is planned and run); the engine stamps it per batch."""

from laminardb.sql.clock import ProcessingClock

__all__ = ["ProcessingClock"]
