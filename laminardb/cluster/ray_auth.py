"""Fail fast when a Ray cluster asks for token authentication this process cannot give.

Why: Ray's own client retries an unauthenticated GCS for ~20 s, then raises a bare
``ConnectionError`` ("Failed to connect to Ray cluster") that does not say why. One gRPC
call to the GCS (``GetClusterId``, a few seconds at most) tells an auth refusal apart, and
``RayAuthError`` says what to set. Only asked when this process would send no token;
anything but a clear refusal leaves the connect to Ray as before.
"""

from __future__ import annotations

import os
from pathlib import Path

from laminardb.cluster.exceptions import RayAuthError

_PROBE_TIMEOUT_S = 3.0


def check_token_auth(address: str) -> None:
    """Raise ``RayAuthError`` if the cluster at ``address`` (``auto`` or ``host:port`` of its
    GCS) refuses this process for want of a token; return otherwise."""
    if _sends_token(address):
        return
    gcs = _gcs_address(address)
    if gcs is not None and _refused(gcs):
        raise RayAuthError(
            f"the Ray cluster at {gcs} uses token authentication and this process has no token: set "
            "RAY_AUTH_MODE=token and the cluster's token (RAY_AUTH_TOKEN, or RAY_AUTH_TOKEN_PATH, or "
            "~/.ray/auth_token — `ray get-auth-token` on the head prints it) in the environment, then "
            "connect again")


def _sends_token(address: str) -> bool:
    """Whether ``ray.init(address)`` will send a token: ``RAY_AUTH_MODE=token``, or (mode unset,
    address ``auto``) a token Ray finds by itself (it then turns token mode on)."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None:
        return mode.lower() == "token"
    if address != "auto":
        return False
    try:
        from ray._raylet import AuthenticationTokenLoader

        return bool(AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True))
    except Exception:  # noqa: BLE001 - a Ray without token auth: where it would look
        return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                    or (Path.home() / ".ray" / "auth_token").exists())


def _gcs_address(address: str) -> str | None:
    try:
        from ray._private.services import canonicalize_bootstrap_address

        return canonicalize_bootstrap_address(address)
    except Exception:  # noqa: BLE001 - no cluster found: ray.init reports it
        return None


def _refused(gcs: str) -> bool:
    """One ``GetClusterId`` without a token: True only on an UNAUTHENTICATED answer."""
    try:
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:
        return False
    channel = grpc.insecure_channel(gcs)
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=_PROBE_TIMEOUT_S)
        return False
    except grpc.RpcError as exc:
        return exc.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        channel.close()
