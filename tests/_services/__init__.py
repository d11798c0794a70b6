"""Helpers that start real services for integration tests (Raft voters, Tansu Kafka, gossip).

Each starter returns a handle whose ``stop()`` kills every process it started; the pytest
fixtures in ``fixtures.py`` call it in finalizers, so processes die even when a test fails.
"""
