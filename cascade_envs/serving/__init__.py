"""The serving core every protocol shares (``cascade-envs serve --protocol NAME ENV_ID``).

API (stable; protocols build on it):

- ``auth.check_access(host, token=None, allow_remote=False, *, what) -> str | None``: the rule of
  who may connect, for ``serve``, ``serve-sandbox`` and ``serve-judge``: loopback needs nothing; any
  other host needs a bearer token (``--token`` or ``$CASCADE_ENVS_TOKEN``) or ``--allow-remote``,
  else a one-line ``CascadeError`` naming the fix. Returns the token to pass to
  ``http_server.serve(..., token=)``, which answers 401 to a request without
  ``Authorization: Bearer <token>`` (``hmac.compare_digest``), before reading its body.
- ``sessions.SessionStore(env, *, max_sessions=256, ttl_s=600, request_deadline_s=300)``: one env
  instance, many sessions. ``await store.create(**state) -> Session`` (``Overloaded``/503 with
  Retry-After past ``max_sessions``); ``store.get(id)`` (``BadRequest`` for a malformed id,
  ``UnknownSession``/404 for an id of no live session); ``async with store.use(id, deadline_s) as
  session:`` holds the session's lock within the request deadline (``DeadlineExceeded``/504; a
  request cut mid-way marks the session broken: later uses are 409); ``await
  store.start_episode(session, row) -> Episode`` (ends the previous one; a bad row is a 400);
  ``await store.end_episode(session)``; ``await store.close(id)``; ``store.start()`` runs the
  sweeper that expires sessions idle past ``ttl_s`` (``await store.sweep()`` does one pass);
  ``await store.aclose()``; ``store.stats()``. A ``Session`` has ``id`` (unguessable), ``episode``,
  ``state`` (the protocol's dict), ``lock``, ``broken``, ``closed``.
- ``errors``: ``ServingError(message, status=, retry_after=)`` and its kinds ``BadRequest`` (400),
  ``UnknownSession``/``NotFound`` (404), ``Conflict`` (409), ``Overloaded`` (503),
  ``DeadlineExceeded`` (504).
- ``router.Router(fallback=None)``: ``router.add(method, path, route)``; a route is ``async (Request)
  -> Response | JSON value``; a ``ServingError`` becomes its status; ``router.handle_request`` is what
  the HTTP layer calls. ``json_body(request)`` parses a JSON-object body (400 otherwise).
  ``http_server.Request`` has ``method, path, query, headers`` (lower-cased), ``body``,
  ``cookie(name)``; ``http_server.Response(status, body, headers)``.
- ``protocols.PROTOCOLS``: name -> ``"module:factory"`` (lazy import); a factory takes a
  ``ServeContext(env_id, env, store, options)`` and returns a handler (``handle_request``, optional
  ``async aclose()``). Adding a protocol is one line there.
- ``server.start(protocol, env, host="127.0.0.1", port=0, *, token=None, allow_remote=False,
  limits=None, max_sessions, ttl_s, request_deadline_s, env_kwargs=None, options=None) -> Served``
  (``.url``, ``.store``, ``.handler``, ``.env``, ``await .aclose()``); ``server.serve_env(...)``
  blocks (the CLI's); ``server.BackgroundServer(protocol, env, **same)`` runs it on a thread
  (``.url``, ``.store``, ``.call(coro)``, ``.close()``; a context manager).

Body limits, 400/413/408 and idle connections are the HTTP layer's (``cascade_envs.http_server``).
"""

from __future__ import annotations

from .auth import TOKEN_ENV, check_access, is_loopback
from .errors import (
    BadRequest,
    Conflict,
    DeadlineExceeded,
    NotFound,
    Overloaded,
    ServingError,
    UnknownSession,
)
from .protocols import PROTOCOLS, ServeContext, protocol_factory
from .router import Router, error_response, json_body
from .sessions import Session, SessionStore

__all__ = [
    "PROTOCOLS",
    "TOKEN_ENV",
    "BadRequest",
    "Conflict",
    "DeadlineExceeded",
    "NotFound",
    "Overloaded",
    "Router",
    "ServeContext",
    "ServingError",
    "Session",
    "SessionStore",
    "UnknownSession",
    "check_access",
    "error_response",
    "is_loopback",
    "json_body",
    "protocol_factory",
]
