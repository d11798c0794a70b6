"""Modules only mypy reads (``tests/test_architecture.py``, ``make lint``); pytest collects none."""
