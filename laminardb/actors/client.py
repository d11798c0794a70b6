"""The cluster client: ``laminardb.connect("ray://…")`` (built out in the Delta data-plane work)."""

from __future__ import annotations

from laminardb.errors import ClusterError


def connect(address: str, **kwargs):
    """Connect to a Delta cluster (``ray://host:port`` or ``ray://auto``)."""
    raise ClusterError(
        f"connect({address!r}): the Delta cluster client is not available in this build yet; "
        "use laminardb.open() for the embedded engine",
        code="LDB-8001",
    )
