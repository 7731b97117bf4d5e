"""The ``nemo-gym`` protocol: a cascade env as a NeMo Gym resources server, on the serving core.

Routes (JSON; the session rides in the ``cascade_session`` cookie, set on every answer that has one,
as NeMo Gym's agents pass the resources server's cookies from call to call):

- ``POST /seed_session`` and ``POST /reset`` (``EnvResetRequest``): start an episode of the row
  (``cascade_row`` when the body has one, else the body itself) in the cookie's live session or a new
  one; ``/reset`` answers ``{"observation": null, "info": {...}}`` (the prompt is in
  ``responses_create_params.input``; ``info`` offers ``/close`` and step replay to NeMo Gym 0.7's
  gymnasium agent). A typed seed (NeMo Gym 0.7's environment servers: ``resources_session_id``,
  ``episode_id``, ``task_id``, ``task_data`` holding the row) answers ``{"resources_session_id"}``
  and follows that contract (``env_sessions``): a repeat returns its session, ``POST /close_session``
  ends it for good.
- ``POST /<tool>``: one tool call (the body: its arguments) played as a model turn of the episode;
  answers ``{"output": text}`` (after the episode's end: an error text, for the model to read).
- ``POST /step`` (``EnvStepRequest``: ``response`` is one model turn): the env's answer,
  ``{"observation", "reward", "terminated", "truncated", "info"}`` with ``info["tool_outputs"] =
  [{"call_id", "output"}]`` for the turn's ``function_call`` items; the terminal step carries the
  reward and closes the session. A step sent again with the same ``_ng_step_request_id`` gets the
  answer already given. ``POST /close`` ends the cookie's session (a rollout that failed midway).
- ``POST /verify`` (``BaseVerifyRequest``: the whole rollout's ``response``): plays its final turn,
  scores the episode, answers the request with ``reward`` (``BaseVerifyResponse``) and closes the session.
- ``POST /aggregate_metrics``, ``GET /health``.

A masked reward (the verifier or judge failed) is never a plain 0: ``reward`` is 0.0 and
``mask_sample`` is true (NeMo Gym's flag for samples the trainer drops; NeMo-RL honours it with
``env.should_mask_flagged_samples``), with the reason in ``reward_masked_reason`` and 0.7's
``failure_reason``/``failure_kind``. Group-scored envs (GenRM) need
``options["num_rollouts_per_prompt"]`` and score per cohort (``_ng_task_index`` or a typed seed's
``task_id``, else the task id) under ``options["group_deadline_s"]`` (``groups``).
"""

from __future__ import annotations

import re
from typing import Any

from ...core import CascadeError, Message, Reward
from ...data import task_id
from ...episode import Episode
from ...http_server import Request, Response
from ...serving import BadRequest, Conflict, Router, ServeContext, Session, UnknownSession, json_body
from ...serving.errors import ServingError
from ...serving.router import error_response
from .env_sessions import SeededSessions, StepReplays, close_locked, step_request_id, typed_seed
from .groups import GROUP_INCOMPLETE, GroupScorer
from .responses import FunctionCall, completion_of, observation_text, tool_call_text

COOKIE = "cascade_session"
GROUP_DEADLINE_S = 300.0
"""Default wait for a cohort's last rollouts before it is scored with what arrived."""
TASK_INDEX_KEY = "_ng_task_index"
TOOL_ROUTE = re.compile(r"/([A-Za-z_][A-Za-z0-9_.\-]{0,127})")
RESERVED = {
    "seed_session",
    "close_session",
    "verify",
    "reset",
    "step",
    "close",
    "aggregate_metrics",
    "health",
    "mcp",
}
EPISODE_CONTRACT = {"supports_explicit_close": True, "supports_step_idempotency": True}
"""What ``/reset``'s ``info`` offers NeMo Gym 0.7's gymnasium agent: ``/close`` and step replay."""


def _set_cookie(session_id: str) -> tuple[str, str]:
    return ("set-cookie", f"{COOKIE}={session_id}; Path=/; HttpOnly; SameSite=Lax")


def reward_fields(reward: Reward) -> dict[str, Any]:
    """A cascade reward as verify/step fields: masked ones are flagged, never a silent 0."""
    reason = reward.error or reward.reason if reward.masked else None
    incomplete = reward.components.get(GROUP_INCOMPLETE)
    return {
        "reward": 0.0 if reward.masked else float(reward.value),
        "mask_sample": reward.masked,
        "reward_masked_reason": reason,
        "failure_reason": reason,
        "failure_kind": ("cohort_incomplete" if incomplete else "verifier_error") if reward.masked else None,
        "reward_reason": reward.reason,
        "reward_components": {
            k: v for k, v in reward.components.items() if isinstance(v, (int, float, str, bool))
        },
    }


def masked(result: dict[str, Any]) -> bool:
    """Whether a rollout's result is masked: ``mask_sample`` on top (``/verify``) or in the ``info`` of
    the last ``/step``'s answer, which NeMo Gym's gymnasium agent passes on as the result's ``info``."""
    info = result.get("info")
    return bool(result.get("mask_sample") or (isinstance(info, dict) and info.get("mask_sample")))


def _turn_answer(episode: Episode, observation: list[Message], calls: list[FunctionCall]) -> dict[str, Any]:
    """A non-final ``/step`` answer: the env's tool messages by ``call_id``, the rest as observation."""
    tool_messages = [m for m in observation if m.get("role") == "tool"]
    info: dict[str, Any] = {"turn": episode.turns}
    rest = observation
    if calls and len(tool_messages) >= len(calls):
        info["tool_outputs"] = [
            {"call_id": c.call_id, "output": str(m.get("content") or "")}
            for c, m in zip(calls, tool_messages, strict=False)
        ]
        rest = [m for m in observation if m not in tool_messages[: len(calls)]]
    return {
        "observation": observation_text(rest),
        "reward": 0.0,
        "terminated": False,
        "truncated": False,
        "info": info,
    }


class NemoGymHandler(Router):
    """The protocol's routes over one ``SessionStore``; see the module docstring."""

    def __init__(self, ctx: ServeContext):
        super().__init__(fallback=self.tool)
        self.ctx = ctx
        self.store = ctx.store
        self.env = ctx.env
        self.groups: GroupScorer | None = None
        self.seeded = SeededSessions(self.store)
        self.replays = StepReplays()
        if self.env.scores_groups:
            size = ctx.options.get("num_rollouts_per_prompt")
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise CascadeError(
                    f"{ctx.env_id} scores answers in groups: pass --options "
                    "'{\"num_rollouts_per_prompt\": G}' (the rollouts NeMo Gym collects per prompt)"
                )
            deadline = float(ctx.options.get("group_deadline_s", GROUP_DEADLINE_S))
            self.groups = GroupScorer(self.env, size, deadline)
        for path, route in {
            "/seed_session": self.seed_session,
            "/close_session": self.close_session,
            "/reset": self.reset,
            "/step": self.step,
            "/close": self.close,
            "/verify": self.verify,
            "/aggregate_metrics": self.aggregate_metrics,
        }.items():
            self.add("POST", path, route)
        self.add("GET", "/health", self.health)

    # ----- sessions -----------------------------------------------------------------------------

    def _answer(self, session: Session | None, body: Any, status: int = 200) -> Response:
        headers = []
        if session is not None and not session.closed:
            headers.append(_set_cookie(session.id))
        return Response(status, body, headers)

    async def handle_request(self, request: Request) -> Response:
        """The route's answer; a cookie naming a live session is set again on every answer, errors
        included, as NeMo Gym's agents keep only the cookies of the last answer."""
        response = await super().handle_request(request)
        session_id = request.cookie(COOKIE)
        if (
            session_id is not None
            and session_id in self.store
            and not any(name == "set-cookie" for name, _ in response.headers)
        ):
            response.headers.append(_set_cookie(session_id))
        return response

    def _session_id(self, request: Request) -> str:
        session_id = request.cookie(COOKIE)
        if session_id is None:
            raise BadRequest(f"no session: call /seed_session or /reset first and send its {COOKIE} cookie")
        return session_id

    def _deadline(self) -> float:
        extra = self.groups.deadline_s + 30.0 if self.groups else 0.0
        return self.store.request_deadline_s + extra

    async def _start(self, row: Any, task_key: Any, cookie: str | None) -> tuple[Session, Episode]:
        """An episode of ``row`` in the live session ``cookie`` names, else in a new one."""
        if not isinstance(row, dict):
            raise BadRequest("'cascade_row' must be a JSON object (a task row)")
        session = None
        if cookie is not None:
            try:
                session = self.store.get(cookie)
            except (UnknownSession, BadRequest):
                session = None  # a stale cookie: start afresh
        if session is None:
            session = await self.store.create()
        try:
            async with self.store.use(session.id) as held:
                episode = await self.store.start_episode(held, row)
                held.state["task_index"] = task_key
        except ServingError:
            if session.episode is None:
                await self.store.close(session.id)
            raise
        return session, episode

    async def seed_session(self, request: Request) -> Response:
        body = json_body(request)
        seed = typed_seed(body)
        if seed is None:
            row = body.get("cascade_row", body)
            session, _ = await self._start(row, body.get(TASK_INDEX_KEY), request.cookie(COOKIE))
            return self._answer(session, {})
        existing = self.seeded.existing(seed)
        if existing is None:
            existing, _ = await self._start(seed.row, seed.task_key, None)
            self.seeded.bind(seed, existing)
        return self._answer(existing, {"resources_session_id": seed.resources_session_id})

    async def close_session(self, request: Request) -> Response:
        rsid = json_body(request).get("resources_session_id")
        if not isinstance(rsid, str) or not rsid:
            raise BadRequest("'resources_session_id' must be a non-empty string")
        await self.seeded.close(rsid)
        return Response(200, {"resources_session_id": rsid})

    async def reset(self, request: Request) -> Response:
        body = json_body(request)
        row = body.get("cascade_row", body)
        session, episode = await self._start(row, body.get(TASK_INDEX_KEY), request.cookie(COOKIE))
        info = {"task_id": episode.task_id, "max_turns": episode.max_turns, **EPISODE_CONTRACT}
        return self._answer(session, {"observation": None, "info": info})

    async def close(self, request: Request) -> Response:
        """End the cookie's session, if live (NeMo Gym 0.7's gymnasium agent, after a failed rollout)."""
        session_id = request.cookie(COOKIE)
        if session_id is not None:
            await close_locked(self.store, session_id)
        return Response(200, {})

    # ----- turns --------------------------------------------------------------------------------

    def _episode(self, session: Session, body: dict[str, Any] | None = None) -> Episode:
        episode = session.episode
        if episode is None:
            raise Conflict("this session has no episode: call /seed_session or /reset first")
        row = body.get("cascade_row") if body else None
        if isinstance(row, dict) and task_id(row) != episode.task_id:
            raise Conflict(
                f"this session plays task {episode.task_id!r}, not {task_id(row)!r}: one session per rollout"
            )
        return episode

    async def tool(self, request: Request) -> Response:
        match = TOOL_ROUTE.fullmatch(request.path)
        if match is None or match.group(1) in RESERVED:
            return error_response(ServingError(f"no route POST {request.path}", status=404))
        name = match.group(1)
        arguments = json_body(request, allow_empty=True)
        async with self.store.use(self._session_id(request)) as session:
            episode = self._episode(session)
            if episode.done:  # said to the model as the tool's output, as NeMo Gym tools report errors
                return self._answer(session, {"output": "Error: the episode has ended; no more tool calls."})
            turn = await self.env.aadvance(episode, tool_call_text(name, arguments))
            text = observation_text(turn.observation) or ""
            return self._answer(session, {"output": text})

    async def _finish(self, session: Session, episode: Episode) -> Reward:
        """Score the finished episode (with its cohort for a group-scored env)."""
        if self.groups is not None:
            key = session.state.get("task_index")
            return await self.groups.score(f"{key if key is not None else episode.task_id}", episode)
        return (await self.env.ascore_episodes([episode]))[0]

    async def step(self, request: Request) -> Response:
        body = json_body(request)
        request_id = step_request_id(body)
        completion, calls = completion_of(body.get("response"))
        session_id = self._session_id(request)
        try:
            async with self.store.use(session_id, self._deadline()) as session:
                replay = self.replays.live(session, request_id) or self.replays.final(session_id, request_id)
                if replay is not None:  # the same step sent again: its answer, the turn not replayed
                    return self._answer(session, replay)
                episode = self._episode(session, body)
                if episode.done:
                    raise Conflict("the episode has ended: /reset to start another")
                turn = await self.env.aadvance(episode, completion)
                if not episode.done:
                    answer = _turn_answer(episode, turn.observation, calls)
                    self.replays.record(session, request_id, answer, final=False)
                    return self._answer(session, answer)
                fields = reward_fields(await self._finish(session, episode))
                answer = {
                    "observation": None,
                    "reward": fields.pop("reward"),
                    "terminated": episode.terminated,
                    "truncated": episode.truncated,
                    "info": {**fields, "task_id": episode.task_id, "turns": episode.turns},
                }
                self.replays.record(session, request_id, answer, final=True)
        except UnknownSession:
            replay = self.replays.final(session_id, request_id)  # the first try closed the session meanwhile
            if replay is None:
                raise
            return self._answer(None, replay)
        await self.store.close(session_id)
        return self._answer(None, answer)

    async def verify(self, request: Request) -> Response:
        body = json_body(request)
        if not isinstance(body.get("responses_create_params"), dict):
            raise BadRequest("'responses_create_params' must be an object")
        completion, _ = completion_of(body.get("response"), after_last_tool_output=True)
        session_id = self._session_id(request)
        async with self.store.use(session_id, self._deadline()) as session:
            episode = self._episode(session, body)
            if not episode.done:
                await self.env.aadvance(episode, completion)
            if not episode.done:
                await self.env.atruncate(episode, "the rollout ended before the episode did")
            reward = await self._finish(session, episode)
        await self.store.close(session_id)
        return self._answer(None, {**body, **reward_fields(reward)})

    async def aggregate_metrics(self, request: Request) -> Response:
        body = json_body(request)
        responses = body.get("verify_responses")
        if not isinstance(responses, list) or not all(isinstance(r, dict) for r in responses):
            raise BadRequest("'verify_responses' must be a list of objects")
        kept = [r for r in responses if not masked(r)]
        rewards = [float(r["reward"]) for r in kept if isinstance(r.get("reward"), (int, float))]
        by_task: dict[Any, list[float]] = {}
        for r in kept:
            if isinstance(r.get("reward"), (int, float)):
                by_task.setdefault(r.get(TASK_INDEX_KEY), []).append(float(r["reward"]))
        metrics = {
            "num_rollouts": len(responses),
            "num_masked": len(responses) - len(kept),
            "mean/reward": sum(rewards) / len(rewards) if rewards else None,
            "pass@k": (sum(max(v) >= 1.0 for v in by_task.values()) / len(by_task)) if by_task else None,
        }
        groups = [
            {TASK_INDEX_KEY: k, "mean/reward": sum(v) / len(v), "num_rollouts": len(v)}
            for k, v in by_task.items()
        ]
        key = {k: metrics[k] for k in ("mean/reward", "num_masked")}
        return Response(200, {"group_level_metrics": groups, "agent_metrics": metrics, "key_metrics": key})

    async def health(self, request: Request) -> dict[str, Any]:
        groups = self.groups.pending() if self.groups else 0
        return {"env": self.ctx.env_id, "sessions": self.store.stats(), "pending_groups": groups}

    async def aclose(self) -> None:
        if self.groups is not None:
            await self.groups.aclose()


def make_handler(ctx: ServeContext) -> NemoGymHandler:
    """The protocol registry's factory (``serving.protocols.PROTOCOLS["nemo-gym"]``)."""
    return NemoGymHandler(ctx)
