"""Joining or starting Ray for the env actor pools, and shutting down only what was started here.

``connect(address)``: ``"auto"`` (or ``host:port``, ``ray://...``) joins a running cluster,
``"local"`` starts a local instance with this machine's CPUs; when Ray is already initialised in
this process (a test, a notebook), that instance is used whatever the address. Each pool holds
one reference; the last pool to close shuts Ray down if ``connect`` started it.
"""

from __future__ import annotations

import threading
from typing import Any

from .._extras import require
from ..core import CascadeError

_lock = threading.Lock()
_refs = 0
_started_here = False


def connect(address: str | None) -> Any:
    """Make sure Ray is initialised (see the module docstring) and take a reference; returns ``ray``."""
    global _refs, _started_here
    require("ray", "Ray scale-out")
    import ray

    with _lock:
        if not ray.is_initialized():
            if address is not None and (not isinstance(address, str) or not address.strip()):
                raise CascadeError(f"ray.address: expected 'auto', 'local' or a Ray address, got {address!r}")
            try:
                ray.init(
                    address=address, ignore_reinit_error=True, log_to_driver=False, include_dashboard=False
                )
            except (ConnectionError, ValueError) as exc:
                raise CascadeError(f"ray.address: cannot reach Ray at {address!r}: {exc}") from None
            _started_here = True
        _refs += 1
    return ray


def release() -> None:
    """Drop one reference; shut Ray down when none is left and ``connect`` started it."""
    global _refs, _started_here
    with _lock:
        _refs = max(0, _refs - 1)
        if _refs or not _started_here:
            return
        _started_here = False
    import ray

    ray.shutdown()
