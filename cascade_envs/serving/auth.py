"""Who may connect to a cascade server: one rule for ``serve``, ``serve-sandbox`` and ``serve-judge``.

Loopback (``127.0.0.1``, ``::1``, ``localhost``) is the default and needs nothing. Any other host
needs a bearer token (``--token`` or ``$CASCADE_ENVS_TOKEN``; every request then carries
``Authorization: Bearer <token>``, compared in constant time by the HTTP layer) or an explicit
``--allow-remote`` saying the server runs without one; otherwise the server refuses to start in one
line naming the fix. A token given on loopback is required there too.
"""

from __future__ import annotations

import ipaddress
import os

from ..core import CascadeError

TOKEN_ENV = "CASCADE_ENVS_TOKEN"
"""The environment variable a bearer token is read from when ``--token`` is not given."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_access(
    host: str, token: str | None = None, allow_remote: bool = False, *, what: str = "server"
) -> str | None:
    """The bearer token the server must require (None: none), or a ``CascadeError`` refusing ``host``.

    ``token``: the ``--token`` flag; when None, ``$CASCADE_ENVS_TOKEN`` (an empty value counts as unset).
    """
    token = token if token is not None else os.environ.get(TOKEN_ENV) or None
    if token is not None and not token.strip():
        raise CascadeError("--token must not be empty")
    if token is not None or allow_remote or is_loopback(host):
        return token
    raise CascadeError(
        f"refusing to serve the {what} on {host} without authentication: pass --token TOKEN (or set "
        f"${TOKEN_ENV}) so clients must send 'Authorization: Bearer TOKEN', or --allow-remote to serve "
        "with none, or use --host 127.0.0.1"
    )
