"""The engine core: the reactor that runs a catalog of sources, queries, views and sinks.

``Engine`` (``engine.py``) is what a connection is a facade over; ``contracts.py`` states what
the engine expects of operators, sources, sinks and the ``ExecutionBackend`` that places them.
"""
