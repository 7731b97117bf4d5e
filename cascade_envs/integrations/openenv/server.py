"""``cascade-envs serve --protocol openenv ENV_ID``: a cascade env as an OpenEnv server.

Speaks ``openenv-core``'s wire format (``wire``) on the kernel's HTTP server, with the shared
session store (``cascade_envs.serving``) behind it:

- ``WS /ws``: one session per connection (``EnvClient``'s transport): ``reset``, ``step``,
  ``state`` and ``close`` messages, each under the store's request deadline; past the store's
  ``max_sessions`` a new connection gets a ``CAPACITY_REACHED`` error and is closed; a connection
  that closes or drops (mid-episode included) frees its session; an idle one closes after the
  store's ``ttl_s``;
- ``GET /schema``, ``/metadata``, ``/health``, ``/state`` (no session: an empty state);
- ``POST /reset`` and ``POST /step``: stateless, as in OpenEnv (each request its own env): a reset
  returns a task's opening observation; a step plays and scores one reply to a task it names
  (``index``, ``task_id`` or ``task`` beside ``action``), for single-turn envs only.

Group-scored envs (GenRM) are refused: OpenEnv scores each episode alone. MCP (``/mcp``) is not served.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from ...core import CascadeError, Row
from ...data import Loaded
from ...episode import Episode
from ...http_server import MAX_BODY_MB, Request
from ...serving import (
    BadRequest,
    Conflict,
    DeadlineExceeded,
    Overloaded,
    Router,
    ServeContext,
    ServingError,
    Session,
    UnknownSession,
    json_body,
)
from ...websocket import GOING_AWAY, WebSocket, WebSocketRoute
from . import wire

log = logging.getLogger("cascade_envs.integrations.openenv")

WS_PATH = "/ws"
CAPACITY_LINGER_S = 5.0
"""A connection refused for capacity waits this long for a first request to answer with the refusal."""


def make_handler(ctx: ServeContext) -> OpenEnvHandler:
    """The ``openenv`` protocol's factory (``cascade_envs.serving.protocols``)."""
    return OpenEnvHandler(ctx)


class OpenEnvHandler:
    """HTTP routes and the ``/ws`` sessions of one served env (see the module docstring).

    ``options``: ``max_message_mb`` (a WebSocket message's limit, default the HTTP body limit).
    """

    def __init__(self, ctx: ServeContext):
        if ctx.env.scores_groups:
            raise CascadeError(
                f"{ctx.env_id} scores the answers to a prompt together (a group); OpenEnv scores each "
                "episode alone and has no group slot: serve it with --protocol nemo-gym"
            )
        self.env, self.env_id, self.store = ctx.env, ctx.env_id, ctx.store
        max_message = float(ctx.options.get("max_message_mb", MAX_BODY_MB))
        self.route = WebSocketRoute(self._serve_socket, int(max_message * (1 << 20)), ctx.store.ttl_s)
        self._rng = np.random.default_rng()
        self._by_id: dict[str, int] | None = None
        self._sockets: set[WebSocket] = set()
        self.router = Router()
        for method, path, route in (
            ("GET", "/health", self._health),
            ("GET", "/schema", self._schema),
            ("GET", "/metadata", self._metadata),
            ("GET", "/state", self._empty_state),
            ("POST", "/reset", self._http_reset),
            ("POST", "/step", self._http_step),
        ):
            self.router.add(method, path, route)

    async def handle_request(self, request: Request) -> Any:
        return await self.router.handle_request(request)

    def websocket_route(self, path: str) -> WebSocketRoute | None:
        return self.route if path == WS_PATH else None

    async def aclose(self) -> None:
        """Close every open WebSocket (1001) so their sessions end before the store closes."""
        await asyncio.gather(*(ws.close(GOING_AWAY, "server shutting down") for ws in list(self._sockets)))

    # ----- WebSocket sessions -------------------------------------------------------------------

    async def _serve_socket(self, ws: WebSocket) -> None:
        """One connection, one session, until the client closes or drops the connection."""
        try:
            session = await self.store.create(protocol="openenv")
        except Overloaded as exc:  # said at once (as OpenEnv does) and to the first request, then closed
            full = {"active_sessions": len(self.store), "max_sessions": self.store.max_sessions}
            refusal = json.dumps(wire.error(str(exc), wire.CAPACITY_REACHED, **full))
            await ws.send(refusal)
            with contextlib.suppress(TimeoutError):
                if await asyncio.wait_for(ws.receive(), CAPACITY_LINGER_S) is not None:
                    await ws.send(refusal)
            return
        session.state.update(episode_id=None, step_count=0, done=False, task_id=None)
        self._sockets.add(ws)
        try:
            while (raw := await ws.receive()) is not None:
                try:
                    message = wire.parse_message(raw)
                    if message.get("type") == "close":
                        break
                    answer = await self._answer(session, message)
                except wire.WireError as exc:
                    answer = wire.error(str(exc), exc.code)
                except UnknownSession as exc:  # expired (idle past the store's ttl) or closed
                    await ws.send(json.dumps(wire.error(str(exc), wire.SESSION_ERROR)))
                    break
                except BadRequest as exc:  # a task row the env refuses
                    answer = wire.error(str(exc), wire.VALIDATION_ERROR)
                except (DeadlineExceeded, Conflict) as exc:  # the episode may be half-advanced: start over
                    gone = f"{exc}; the session is closed: connect again"
                    await ws.send(json.dumps(wire.error(gone, wire.SESSION_ERROR, status=exc.status)))
                    break
                except ServingError as exc:
                    answer = wire.error(str(exc), wire.EXECUTION_ERROR, status=exc.status)
                except Exception as exc:  # the env failed: the session goes on, as in OpenEnv
                    log.exception("openenv %s failed", message.get("type"))
                    answer = wire.error(f"{type(exc).__name__}: {exc}", wire.EXECUTION_ERROR)
                await ws.send(json.dumps(answer))
        finally:
            self._sockets.discard(ws)
            await self.store.close(session.id)

    async def _answer(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        kind = message.get("type", "")
        if kind not in ("reset", "step", "state"):
            raise wire.WireError(f"Unknown message type: {kind}", wire.UNKNOWN_TYPE)
        allowed = {"type"} if kind == "state" else {"type", "data"}
        if set(message) - allowed:
            raise wire.WireError(f"a {kind} message has only {sorted(allowed)}")
        if kind == "step" and "data" not in message:
            raise wire.WireError("a step message needs 'data': the action")
        async with self.store.use(session.id) as held:
            if kind == "reset":
                return {"type": "observation", "data": await self._reset(held, message.get("data", {}))}
            if kind == "step":
                return {"type": "observation", "data": await self._step(held, message["data"])}
            return {"type": "state", "data": self._state(held)}

    # ----- the episode of a session -------------------------------------------------------------

    async def _reset(self, session: Session, data: Any) -> dict[str, Any]:
        options = wire.reset_options(data)
        item = self._pick(options)
        if isinstance(item, Loaded):
            await self.store.end_episode(session)
            episode: Episode = await self.env.astart(item)
            session.episode = episode
        else:
            episode = await self.store.start_episode(session, item)
        session.state.update(
            episode_id=options.get("episode_id") or uuid.uuid4().hex,
            step_count=0,
            done=False,
            task_id=episode.task_id,
        )
        return wire.result(list(episode.messages), task_id=episode.task_id, turn=0)

    async def _step(self, session: Session, data: Any) -> dict[str, Any]:
        text = wire.action_text(data, self.env.tool_parser)
        episode = session.episode
        if episode is None:
            why = "the episode has ended: reset to start another" if session.state["done"] else "reset first"
            raise wire.WireError(f"no episode in play: {why}", wire.EXECUTION_ERROR)
        turn = await self.env.aadvance(episode, text)
        session.state["step_count"] += 1
        reward = None
        if episode.done:
            reward = (await self.env.ascore_episodes([episode]))[0]
            await self.store.end_episode(session)
            session.state["done"] = True
        return wire.result(
            list(turn.observation),
            task_id=episode.task_id,
            turn=episode.turns,
            done=episode.done,
            truncated=episode.truncated,
            reward=reward,
        )

    def _state(self, session: Session) -> dict[str, Any]:
        keys = ("episode_id", "step_count", "task_id", "done")
        return {**{k: session.state[k] for k in keys}, "env_id": self.env_id}

    def _pick(self, options: dict[str, Any]) -> Row | Loaded[Any]:
        """The task a reset asks for (see ``wire.RESET_KEYS``)."""
        if options.get("task") is not None:
            return dict(options["task"])
        tasks = self.env.tasks
        if not tasks:
            raise wire.WireError(f"{self.env_id} was served without tasks: pass a task row as 'task'")
        if options.get("index") is not None:
            if options["index"] >= len(tasks):
                raise wire.WireError(f"'index' {options['index']} is past the {len(tasks)} tasks")
            return tasks[options["index"]]
        if options.get("task_id") is not None:
            if self._by_id is None:
                self._by_id = {t.task_id: i for i, t in reversed(list(enumerate(tasks)))}
            if options["task_id"] not in self._by_id:
                raise wire.WireError(f"no task has the id {options['task_id']!r}")
            return tasks[self._by_id[options["task_id"]]]
        seed = options.get("seed")
        return tasks.sample(np.random.default_rng(seed) if seed is not None else self._rng)

    # ----- HTTP ---------------------------------------------------------------------------------

    async def _health(self, request: Request) -> dict[str, Any]:
        return {"status": "healthy"}

    async def _schema(self, request: Request) -> dict[str, Any]:
        return {
            "action": wire.ACTION_SCHEMA,
            "observation": wire.OBSERVATION_SCHEMA,
            "state": wire.STATE_SCHEMA,
        }

    async def _metadata(self, request: Request) -> dict[str, Any]:
        from ... import __version__

        doc = (type(self.env).__doc__ or "").strip().splitlines()
        return {
            "name": self.env_id,
            "description": doc[0] if doc else self.env_id,
            "readme_content": None,
            "version": __version__,
            "author": None,
            "documentation_url": None,
        }

    async def _empty_state(self, request: Request) -> dict[str, Any]:
        return {"episode_id": None, "step_count": 0, "task_id": None, "done": False, "env_id": self.env_id}

    async def _http_reset(self, request: Request) -> dict[str, Any]:
        """OpenEnv's stateless ``POST /reset``: a task's opening observation (the episode is not kept)."""
        body = json_body(request, allow_empty=True)
        async with self._one_off() as session:
            return await self._reset(session, body)

    async def _http_step(self, request: Request) -> dict[str, Any]:
        """OpenEnv's stateless ``POST /step``: one reply to the named task, played and scored."""
        body = json_body(request)
        if self.env.max_turns > 1:
            raise Conflict(
                f"{self.env_id} is multi-turn and HTTP steps keep no session (as in OpenEnv): "
                f"play its episodes over the WebSocket {WS_PATH}"
            )
        if "action" not in body:
            raise BadRequest("a step needs 'action'")
        selector = {k: body[k] for k in ("task", "index", "task_id") if k in body}
        if not selector:
            raise BadRequest(
                "HTTP steps keep no session (as in OpenEnv): name the task beside the action "
                f"('index', 'task_id' or 'task'), or play over the WebSocket {WS_PATH}"
            )
        unknown = sorted(set(body) - {"action", "timeout_s", "request_id", *selector})
        if unknown:
            raise BadRequest(f"unknown step fields {unknown}")
        timeout = body.get("timeout_s")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0
        ):
            raise BadRequest("'timeout_s' must be a positive number")
        async with self._one_off(timeout) as session:
            await self._reset(session, selector)
            return await self._step(session, body["action"])

    @contextlib.asynccontextmanager
    async def _one_off(self, deadline_s: float | None = None) -> AsyncIterator[Session]:
        """A session for one HTTP request (it counts against the cap), closed when the request ends."""
        session = await self.store.create(protocol="openenv-http")
        session.state.update(episode_id=None, step_count=0, done=False, task_id=None)
        deadline = min(deadline_s or self.store.request_deadline_s, self.store.request_deadline_s)
        try:
            async with self.store.use(session.id, deadline) as held:
                try:
                    yield held
                except wire.WireError as exc:
                    raise BadRequest(str(exc)) from None
        finally:
            await self.store.close(session.id)
