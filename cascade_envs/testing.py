"""``check_env``: the conformance check every environment passes, built-in or from a plugin.

    from cascade_envs.testing import check_env

    def test_my_env_conforms():
        check_env("myns/MyEnv-v0", good_row=ROW, good_answer="... \\\\boxed{42}", bad_answer="\\\\boxed{41}")

An env package keeps its arguments as a ``Case`` in its ``conformance`` module (``CASE``), next to
the env; ``conformance_case(env_id)`` finds it and ``Case.check`` runs it. It plays the env the way
the runner and the trainer do and asserts the contracts of DESIGN.md §2:

- ``reset`` with a row and with a seed (the same seed draws the same task); observations are chat
  messages of the env's observation space;
- malformed rows (not a mapping, empty, and any ``bad_rows`` you pass with the field they break)
  raise ``TaskError``, naming the field where you say which;
- two instances (the second made with ``other_kwargs``, when the env is given by id or those are
  given) each load their own tasks: none is shared, so one's settings never reach the other's tasks;
- the good answer earns a positive, unmasked reward (through ``step`` and through the runner); the
  bad answer, if given, a plain 0;
- malformed answers — empty, whitespace, zero-width or other invisible characters only, several
  megabytes, invalid UTF-8, an unterminated ``<think>``, a generation cut at the length limit —
  score a clear, unmasked 0 within ``time_limit_s``: a model can neither earn reward with no
  answer nor turn a wrong answer into a masked one;
- a masked reward carries an error, a zero carries no error, and they are told apart;
- where the env has no group hook, scoring a group gives what scoring each answer alone gives.

Multi-turn envs are checked on their final answer: ``good_answer`` is the model's last turn when
``setup_turns`` (earlier model turns, e.g. tool calls) are played first.

Two test doubles play a script where a model would answer, with no model and no network:
``ScriptedPolicy`` (a ``Policy``, for the runner, the CLI or a judge server) and ``ScriptedJudge``
(a ``Judge``, for judged envs: ``make(env_id, judge_url=ScriptedJudge(...))``).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from .core import Completion, Message, Reward, Row, TaskError
from .env import Env, run_sync
from .policy import SamplingParams

__all__ = [
    "MALFORMED_ANSWERS",
    "ConformanceError",
    "JudgeCall",
    "PolicyCall",
    "ScriptedJudge",
    "ScriptedPolicy",
    "check_env",
]

T = TypeVar("T")
Reply = str | Completion
"""A scripted model turn: its text, or a ``Completion`` that also carries token ids and a finish reason."""
PolicyScript = str | Sequence[str] | Callable[[list[Message]], Reply | Awaitable[Reply]] | Exception
JudgeScript = str | Callable[[list[Message]], str] | Exception

MALFORMED_ANSWERS: dict[str, Any] = {
    "empty": "",
    "whitespace": " \n\t ",
    "zero-width": "\u200b\u200c\u200d\u2060\ufeff",
    "invisible": "<think>42</think>\u00a0\u3000\u2028\u00ad\u202e\u3164\u2800\U000e0041",
    "several megabytes": "x" * (3 * 1024 * 1024),
    "invalid UTF-8": b"\xff\xfe\xfa not text \xc3\x28",
    "unterminated think": "<think>I will answer soon",
    "cut at the length limit": Completion("<think>working</think>partial answer", finish_reason="length"),
}


class ConformanceError(AssertionError):
    """An env breaks a contract of DESIGN.md §2; the message says which."""


@dataclass(frozen=True)
class Case:
    """One env's conformance case: ``check_env``'s arguments, kept in the env package's ``conformance.py``."""

    good_row: Row
    good_answer: str
    bad_answer: str | None = None
    bad_rows: Sequence[tuple[Any, str | None]] = ()
    setup_turns: Sequence[str] = ()
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    other_kwargs: Mapping[str, Any] | None = None
    requires: Sequence[str] = ()
    """Modules the env needs (e.g. ``openhands``): ``missing`` names those that are not installed."""

    @property
    def missing(self) -> list[str]:
        return [name for name in self.requires if importlib.util.find_spec(name) is None]

    def check(self, env: str | Env, time_limit_s: float = 60.0) -> None:
        """``check_env(env, ...)`` with this case's arguments."""
        check_env(
            env,
            self.good_row,
            self.good_answer,
            bad_answer=self.bad_answer,
            bad_rows=self.bad_rows,
            setup_turns=self.setup_turns,
            env_kwargs=dict(self.env_kwargs),
            other_kwargs=self.other_kwargs,
            time_limit_s=time_limit_s,
        )


def conformance_case(env_id: str) -> Case:
    """The ``CASE`` of the ``conformance`` module beside the registered env's module (``pkg.env:Cls`` ->
    ``pkg.conformance``); ``LookupError`` when there is none."""
    from .registry import spec

    entry = spec(env_id).entry_point
    module = entry.partition(":")[0] if isinstance(entry, str) else entry.__module__
    name = f"{module.rpartition('.')[0]}.conformance"
    case = getattr(importlib.import_module(name), "CASE", None) if importlib.util.find_spec(name) else None
    if not isinstance(case, Case):
        raise LookupError(f"{env_id}: no conformance case (a Case named CASE in {name})")
    return case


def check_env(
    env: str | Env,
    good_row: Row,
    good_answer: str,
    *,
    bad_answer: str | None = None,
    bad_rows: Iterable[tuple[Any, str | None]] = (),
    setup_turns: Sequence[str] = (),
    env_kwargs: dict[str, Any] | None = None,
    other_kwargs: Mapping[str, Any] | None = None,
    time_limit_s: float = 60.0,
) -> None:
    """Assert that ``env`` (an id or an instance) keeps the environment contract; see the module docstring.

    ``bad_rows``: ``(row, field)`` pairs; each row must raise ``TaskError`` whose ``field`` is the
    given name (``None``: any field). ``other_kwargs``: the settings of a second instance (default:
    ``env_kwargs``, when ``env`` is an id; with an instance, a second one is made only from these).
    """
    run_sync(
        _check(
            env,
            good_row,
            good_answer,
            bad_answer,
            list(bad_rows),
            list(setup_turns),
            env_kwargs or {},
            other_kwargs,
            time_limit_s,
        )
    )


async def _check(
    env_or_id: str | Env,
    good_row: Row,
    good_answer: str,
    bad_answer: str | None,
    bad_rows: list[tuple[Any, str | None]],
    setup_turns: list[str],
    env_kwargs: dict[str, Any],
    other_kwargs: Mapping[str, Any] | None,
    limit: float,
) -> None:
    from .registry import make

    env = make(env_or_id, **env_kwargs) if isinstance(env_or_id, str) else env_or_id
    name = env_or_id if isinstance(env_or_id, str) else type(env).__name__
    _require(isinstance(env, Env), f"{name} is a {type(env).__name__}, not a cascade_envs.Env")
    try:
        await _check_reset(env, name, good_row)
        await _check_rows(env, name, bad_rows)
        if isinstance(env_or_id, str) or other_kwargs is not None:
            settings = {**env_kwargs, **(other_kwargs or {})}
            other = make(env_or_id, **settings) if isinstance(env_or_id, str) else type(env)(**settings)
            try:
                _check_own_tasks(env, other, name, good_row)
            finally:
                await other.aclose()
        good = await _bounded(
            _play(env, good_row, setup_turns, good_answer), limit, f"{name}: the good answer"
        )
        _require(not good.masked and good.value > 0, f"{name}: the good answer scored {_show(good)}")
        _require(good.error is None, f"{name}: an unmasked reward carries an error: {_show(good)}")
        if bad_answer is not None:
            bad = await _bounded(
                _play(env, good_row, setup_turns, bad_answer), limit, f"{name}: the bad answer"
            )
            _require(not bad.masked and bad.value == 0, f"{name}: the bad answer scored {_show(bad)}")
        for label, answer in MALFORMED_ANSWERS.items():
            reward = await _bounded(
                _play(env, good_row, setup_turns, answer), limit, f"{name}: a {label} answer"
            )
            _require(
                not reward.masked and reward.value == 0,
                f"{name}: a {label} answer must score a plain 0, got {_show(reward)}",
            )
        if not setup_turns:
            await _check_group_agrees(env, name, good_row, [good_answer, bad_answer or "", ""], limit)
        await _check_runner(env, name, good_row, setup_turns, good_answer, good.value, limit)
    finally:
        if isinstance(env_or_id, str):
            await env.aclose()


async def _check_reset(env: Env, name: str, row: Row) -> None:
    observation, info = await env.areset(options={"task": row})
    _require(env.observation_space.contains(observation), f"{name}: reset's observation is not chat messages")
    _require(bool(observation), f"{name}: reset gave no prompt messages")
    _require(isinstance(info.get("task_id"), str), f"{name}: reset's info has no task_id")
    if env.tasks is not None and len(env.tasks):
        first = (await env.areset(seed=123))[1]["task_id"]
        again = (await env.areset(seed=123))[1]["task_id"]
        _require(first == again, f"{name}: the same seed drew different tasks ({first} vs {again})")


async def _check_rows(env: Env, name: str, bad_rows: list[tuple[Any, str | None]]) -> None:
    for row, bad in [("not a mapping", None), ({}, None), *bad_rows]:
        try:
            env.load(row)
        except TaskError as exc:
            _require(
                bad is None or exc.field == bad,
                f"{name}: a row with a bad {bad!r} raised TaskError about {exc.field!r}: {exc}",
            )
            continue
        except Exception as exc:
            raise ConformanceError(
                f"{name}: a malformed row raised {type(exc).__name__}, not TaskError: {exc}"
            ) from exc
        raise ConformanceError(f"{name}: the malformed row {str(row)[:80]!r} was accepted")


def _check_own_tasks(env: Env, other: Env, name: str, row: Row) -> None:
    """Each instance loads its own tasks: a task shared between instances would carry the settings of
    the instance that loaded it (a process-wide cache once gave ``top_k=0`` the tasks of ``top_k=5``)."""
    _require(
        env.tasks is None or env.tasks is not other.tasks, f"{name}: two instances share one task source"
    )
    shared = [
        a.task_id
        for a, b in zip(env.tasks or (), other.tasks or (), strict=False)
        if a is b or a.task is b.task
    ]
    shared += ["good_row"] if env.load(row).task is other.load(row).task else []
    _require(not shared, f"{name}: two instances share the tasks {shared[:3]}: each must load its own")


async def _play(env: Env, row: Row, setup_turns: list[str], answer: Any) -> Reward:
    """One episode through the env's machinery: setup turns, the answer, then the scoring path.

    A group-scored env sees the answer next to an empty one (its reward needs a group).
    """
    episodes = [await _played(env, row, setup_turns, answer)]
    if env.scores_groups:
        episodes.append(await _played(env, row, setup_turns, ""))
    try:
        return (await env.ascore_episodes(episodes))[0]
    finally:
        for episode in episodes:
            await env.aend(episode)


async def _played(env: Env, row: Row, setup_turns: list[str], answer: Any) -> Any:
    episode = await env.astart(env.load(row))
    for turn in setup_turns:
        await env.aadvance(episode, turn)
        _require(not episode.done, f"setup turn {turn[:40]!r} ended the episode")
    await env.aadvance(episode, answer)
    if not episode.done:
        await env.atruncate(episode, "conformance check: the answer did not end the episode")
    return episode


async def _check_group_agrees(env: Env, name: str, row: Row, answers: list[str], limit: float) -> None:
    if env.scores_groups:
        return
    group = await _bounded(env.ascore_responses(row, answers), limit, f"{name}: group scoring")
    alone = [await _bounded(env.areward(row, a), limit, f"{name}: scoring alone") for a in answers]
    _require(
        [_key(r) for r in group] == [_key(r) for r in alone],
        f"{name}: group scoring {[_show(r) for r in group]} differs from per-sample {[_show(r) for r in alone]}",
    )


async def _check_runner(
    env: Env, name: str, row: Row, setup_turns: list[str], answer: str, expected: float, limit: float
) -> None:
    from .rollout import RolloutRunner

    policy = ScriptedPolicy([*setup_turns, answer])
    runner = RolloutRunner(policy, group_size=2, envs={"conformance": env})
    (group,) = await _bounded(runner.arun([("conformance", row)]), limit, f"{name}: a runner episode")
    for episode in group.episodes:
        _require(episode.error is None, f"{name}: the runner's episode failed: {episode.error}")
        _require(
            not episode.reward.masked and episode.reward.value == expected,
            f"{name}: through the runner the good answer scored {_show(episode.reward)}, alone {expected}",
        )


class PolicyCall(NamedTuple):
    """One request a ``ScriptedPolicy`` answered."""

    messages: list[Message]
    sampling: SamplingParams
    thinking: bool


class ScriptedPolicy:
    """A ``Policy`` that plays a script instead of a model (no model, no network).

    ``script``: the model turns of every episode (a list: the k-th model turn is ``script[k]``, the
    last one repeated; a ``str``: every turn), or a function of the chat messages that gives the
    turn (a ``str`` or a ``Completion``, or an awaitable of one; it may raise, e.g. a
    ``PolicyError``), or an exception that every call raises. Text finishes with
    ``finish_reason``; a ``Completion`` is returned as given. ``delay_s``: a wait before each reply.
    ``calls`` records every request; ``closed`` turns true in ``aclose``.
    """

    def __init__(self, script: PolicyScript, *, finish_reason: str = "stop", delay_s: float = 0.0) -> None:
        self.script = script
        self.finish_reason = finish_reason
        self.delay_s = delay_s
        self.calls: list[PolicyCall] = []
        self.closed = False

    async def agenerate(
        self, messages: list[Message], *, sampling: SamplingParams, thinking: bool = True
    ) -> Completion:
        self.calls.append(PolicyCall(messages, sampling, thinking))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        script = self.script
        if isinstance(script, Exception):
            raise script
        if isinstance(script, str):
            reply: Reply = script
        elif callable(script):
            made = script(messages)
            reply = await made if inspect.isawaitable(made) else made
        else:
            reply = script[min(sum(m.get("role") == "assistant" for m in messages), len(script) - 1)]
        return reply if isinstance(reply, Completion) else Completion(reply, finish_reason=self.finish_reason)

    async def aclose(self) -> None:
        self.closed = True


class JudgeCall(NamedTuple):
    """One request a ``ScriptedJudge`` answered."""

    messages: list[Message]
    max_tokens: int | None
    temperature: float
    top_p: float


class ScriptedJudge:
    """A ``Judge`` that plays a script instead of a model (no model, no network).

    ``script``: the reply to every request, or a function of the chat messages that gives it (it
    may raise, e.g. a ``JudgeError``), or an exception that every call raises. ``calls`` records
    every request with its sampling settings; ``closed`` turns true in ``aclose``.
    """

    def __init__(self, script: JudgeScript) -> None:
        self.script = script
        self.calls: list[JudgeCall] = []
        self.closed = False

    async def acomplete(
        self,
        messages: list[Message],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
    ) -> str:
        self.calls.append(JudgeCall(messages, max_tokens, temperature, top_p))
        if isinstance(self.script, Exception):
            raise self.script
        return self.script(messages) if callable(self.script) else self.script

    async def aclose(self) -> None:
        self.closed = True


async def _bounded(awaitable: Awaitable[T], limit: float, what: str) -> T:
    try:
        return await asyncio.wait_for(awaitable, limit)
    except TimeoutError:
        raise ConformanceError(f"{what} took more than {limit:g} s") from None


def _key(reward: Reward) -> tuple[float, bool]:
    return reward.value, reward.masked


def _show(reward: Reward) -> str:
    what = reward.error if reward.masked else reward.reason
    return f"{reward.value:g}{' (masked)' if reward.masked else ''}{f': {what}' if what else ''}"


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)
