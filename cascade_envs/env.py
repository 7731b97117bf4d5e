"""The environment base class: a ``gymnasium.Env`` over chat messages with async methods and rewards.

A subclass says how to make its typed task of a row (``load_task``, a frozen dataclass) and how to
score a final answer (``ascore``); multi-turn envs also answer each model turn (``aturn``),
stateful ones prepare and release an episode's state (``on_reset``/``on_end``), and group-scored
ones (GenRM) score the G answers to one prompt together (``ascore_group`` with
``scores_groups = True``).

Tasks: an env instance loads each row once (``load``: its ``load_task`` and the row's id, a
``Loaded``), its task file when it is made (``tasks``), a raw row where one is handed in
(``areset(options={"task": row})``, ``areward``, ``ascore_responses``, the runner). Episodes start
from a ``Loaded`` (``astart``) and never load again; nothing is cached across instances, so two
instances with other settings never share tasks.

Lifecycle: an env instance lives for a run. It owns its run-wide resources (task source, clients,
pools), releases them in ``aclose``, and plays any number of concurrent episodes, each an
``Episode`` (``astart``/``aadvance``). The gymnasium methods (``reset``/``step``) play one episode
at a time on top of the same machinery.

Scoring is one path, ``ascore_episodes``: for a finished group it keeps rewards the env fixed
during play (turn limit, overflow), splits the reasoning off each final answer, applies the
overlong rule and the no-answer rule once (``reasoning.has_visible_text``: nothing visible earns
no point and reaches no scorer), then calls ``ascore_episode`` per answer or ``ascore_group``
once. A scorer that raises masks what it was scoring, with the error; it never turns into a
silent 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, ClassVar, Generic, TypeVar, cast

import gymnasium
from gymnasium.utils import seeding

from .core import ChatSpace, Completion, Message, Reward, Row, TaskError, TextSpace, as_completion
from .data import Loaded, Prompt, TaskSource, TaskT, load_tasks, task_id
from .episode import Episode, Turn
from .reasoning import NO_ANSWER, has_visible_text, overlong_reason, split_reasoning
from .tools import tool_parsers, with_tools

T = TypeVar("T")
log = logging.getLogger("cascade_envs.env")

__all__ = ["Env", "Episode", "Loaded", "Turn", "run_sync"]


class Env(gymnasium.Env[list[Message], str], Generic[TaskT]):
    """Base class of every cascade environment; ``TaskT`` is the type of its tasks (``load_task``).

    Observations are the *new* chat messages of each turn; the action is the model's raw text
    (a ``str`` or a ``Completion``). ``step`` returns the reward as a float and the full ``Reward``
    in ``info["reward"]`` (``None`` for a group-scored env, whose reward needs the whole group).
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium.Env declares it so, not ClassVar
    default_tasks: ClassVar[str | None] = None
    """Task file used when none is given, e.g. ``"bundled:mcqa/samples.jsonl"``."""
    max_turns: int = 1
    thinking: bool = True
    scores_groups: ClassVar[bool] = False
    """True when the reward of an answer depends on the other answers of its group (``ascore_group``)."""
    tool_parser: str = "xml_json"
    episode_timeout_s: float | None = None
    """Wall-clock budget of one episode in the runner; past it the episode ends truncated."""
    max_episode_tokens: int | None = None
    """Token budget of one episode (prompt + every turn); past it the episode ends truncated."""

    def __init__(
        self,
        tasks: str | os.PathLike[str] | Iterable[Row] | None = None,
        *,
        thinking: bool | None = None,
        max_turns: int | None = None,
        system_prompt: str | None = None,
        on_bad_rows: str = "raise",
        episode_timeout_s: float | None = None,
        max_episode_tokens: int | None = None,
    ):
        self.observation_space = ChatSpace()
        self.action_space = TextSpace()
        if thinking is not None:
            self.thinking = bool(thinking)
        if max_turns is not None:
            if max_turns < 1:
                raise ValueError("max_turns must be at least 1")
            self.max_turns = int(max_turns)
        if episode_timeout_s is not None:
            if not episode_timeout_s > 0:
                raise ValueError("episode_timeout_s must be positive")
            self.episode_timeout_s = float(episode_timeout_s)
        if max_episode_tokens is not None:
            if max_episode_tokens < 1:
                raise ValueError("max_episode_tokens must be at least 1")
            self.max_episode_tokens = int(max_episode_tokens)
        self.system_prompt = system_prompt
        source = tasks if tasks is not None else self.default_tasks
        self.tasks: TaskSource[TaskT] | None = (
            None if source is None else load_tasks(source, self.load, on_bad_rows)
        )
        self.episode: Episode[TaskT] | None = None
        """The episode the gymnasium methods (``reset``/``step``) are playing."""

    # ----- what subclasses define -------------------------------------------------------------

    def load_task(self, row: Row) -> TaskT:
        """Check a row and make this env's task of it (a frozen dataclass); ``TaskError`` names the bad field.

        Runs once per row and env instance (``load``); episodes reuse the task. It may read the
        env's settings (set them before ``Env.__init__``). The default task is the row's ``Prompt``.
        """
        return cast(TaskT, Prompt.of(row))

    def prompt(self, task: TaskT) -> list[Message]:
        """An episode's opening messages: the task's ``Prompt`` (the task itself, or its ``prompt``
        field) after ``system_prompt``, with the tools it announces in the system prompt."""
        prompt = task if isinstance(task, Prompt) else getattr(task, "prompt", None)
        if not isinstance(prompt, Prompt):
            raise TypeError(
                f"a {type(task).__name__} has no 'prompt: Prompt' field: give it one or override "
                f"{type(self).__name__}.prompt()"
            )
        messages = list(map(dict, prompt.messages))
        if self.system_prompt and not (messages and messages[0]["role"] == "system"):
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return with_tools(messages, prompt.tools) if prompt.tools else messages

    async def on_reset(self, episode: Episode) -> None:
        """Prepare a new episode's state (``episode.state``): a database, a checkout. Default: none."""

    async def on_end(self, episode: Episode) -> None:
        """Release an episode's state once it is scored. Default: nothing to release."""

    async def aturn(self, episode: Episode, completion: Completion) -> Turn:
        """React to one model turn. The default (single-turn) ends the episode."""
        return Turn(done=True)

    async def ascore(self, task: TaskT, answer: str) -> Reward:
        """Score the final ``answer`` (reasoning split off; it has visible text). Per-sample envs define this."""
        raise NotImplementedError(f"{type(self).__name__} must implement ascore() or ascore_group()")

    async def ascore_episode(self, episode: Episode[TaskT], answer: str) -> Reward:
        """Score one episode's final answer; stateful envs override it to read ``episode.state``."""
        return await self.ascore(episode.task, answer)

    async def ascore_group(
        self, task: TaskT, answers: list[str], episodes: list[Episode[TaskT]]
    ) -> list[Reward]:
        """Score the final answers of one group together (envs with ``scores_groups = True``).

        ``answers[i]`` is ``episodes[i]``'s final answer with the reasoning split off, or ``""`` when
        it has no visible text: that one keeps its place in the group (GenRM compares the others
        against it) and scores ``NO_ANSWER`` whatever this returns. Answers cut by the overlong rule
        or ended by the env never get here.
        """
        raise NotImplementedError(f"{type(self).__name__} sets scores_groups but has no ascore_group()")

    async def acheck(self, task: TaskT, answer: str) -> Reward | None:
        """The env's PUBLIC check of ``answer`` (reasoning split off), or ``None`` when it has none.

        What a solver may see at test time to choose among candidates: a code task's sample tests
        (not the hidden ones that score), or checks stated wholly in the prompt (instruction
        following, structured outputs). Test-time scaling (``cascade_envs.tts``) selects with it;
        the reward stays ``ascore``'s.
        """
        return None

    async def aextract_answer(self, task: TaskT, answer: str) -> str | None:
        """The final answer in ``answer`` (reasoning split off) as a key for majority voting.

        Equal keys mean the same answer (a math value in a canonical form, an MCQA letter); ``None``
        when the env has no extractor or found no answer. The default: no extractor.
        """
        return None

    def no_answer_value(self, task: TaskT) -> float:
        """What a reply with no visible answer earns on ``task`` (reason ``NO_ANSWER``; at most 0).

        0 by default; an env that pays a malformed reply less than 0 returns that, so that saying
        nothing never beats a wrong try.
        """
        return 0.0

    async def atruncation_reward(self, episode: Episode, reason: str) -> Reward:
        """The reward of an episode cut before the model finished (turn limit, budget, overflow)."""
        return Reward.zero(f"truncated: {reason}")

    # ----- playing episodes ---------------------------------------------------------------------

    def load(self, row: Row | Loaded[TaskT]) -> Loaded[TaskT]:
        """``row`` loaded by this env (``load_task``, once), with its id; a ``Loaded`` is returned as it is."""
        if isinstance(row, Loaded):
            return row
        if not isinstance(row, dict):
            raise TaskError(f"a row must be a JSON object, got {type(row).__name__}")
        return Loaded(row, self.load_task(row), task_id(row))

    async def astart(self, loaded: Loaded[TaskT]) -> Episode[TaskT]:
        """Begin an episode of a loaded task (an item of ``tasks``, or ``load(row)``); nothing is loaded again."""
        if not isinstance(loaded, Loaded):
            raise TypeError(
                f"astart takes a Loaded task (env.load(row) or an item of env.tasks), "
                f"got {type(loaded).__name__}"
            )
        episode = Episode(
            loaded.task, loaded.task_id, self.prompt(loaded.task), self.thinking, self.max_turns
        )
        if type(self).on_reset is not Env.on_reset:
            await self.on_reset(episode)
        return episode

    async def aadvance(self, episode: Episode, action: str | Completion) -> Turn:
        """Play one model turn of ``episode``: the env's answer, and whether the episode ended."""
        if episode.done:
            raise RuntimeError("the episode has ended")
        completion = as_completion(action)
        episode.turns += 1
        episode.completions.append(completion)
        episode.messages.append({"role": "assistant", "content": str(completion)})
        try:
            turn = await self.aturn(episode, completion)
        except Exception as exc:
            error = f"{type(self).__name__} raised {type(exc).__name__}: {exc}"
            turn = Turn(reward=Reward.failed(error), done=True)
        episode.messages.extend(turn.observation)
        if turn.done:
            episode.terminated, episode.outcome = True, turn.reward
        elif completion.truncated:
            await self.atruncate(episode, "generation was cut at the maximum length")
        elif episode.turns >= episode.max_turns:
            await self.atruncate(episode, f"turn limit of {episode.max_turns} reached without a final answer")
        return turn

    async def atruncate(self, episode: Episode, reason: str) -> None:
        """End ``episode`` as truncated, with the env's truncation reward (the runner calls this too)."""
        episode.truncated = True
        try:
            episode.outcome = await self.atruncation_reward(episode, reason)
        except Exception as exc:
            episode.outcome = Reward.failed(
                f"{type(self).__name__} truncation rule raised {type(exc).__name__}: {exc}"
            )

    async def aend(self, episode: Episode) -> None:
        """Release the episode's state (``on_end``); an error here never changes its reward."""
        if type(self).on_end is Env.on_end:  # nothing to release (the common, hot case)
            return
        try:
            await self.on_end(episode)
        except Exception as exc:
            log.warning(
                "%s.on_end failed for task %s: %s: %s",
                type(self).__name__,
                episode.task_id,
                type(exc).__name__,
                exc,
            )

    # ----- scoring: one path --------------------------------------------------------------------

    async def ascore_episodes(self, episodes: Sequence[Episode]) -> list[Reward]:
        """Score the finished episodes of one group; see the module docstring. Do not override."""
        if len(episodes) == 1 and not self.scores_groups:  # the per-episode fast path of the runner
            return [await self._score_alone(episodes[0])]
        rewards: list[Reward | None] = [episode.outcome for episode in episodes]
        pending: list[tuple[int, str]] = []
        for i, episode in enumerate(episodes):
            if rewards[i] is not None:
                continue
            answer = self._final_answer(episode)
            if isinstance(answer, Reward):
                rewards[i] = answer
            elif has_visible_text(answer):
                pending.append((i, answer))
            else:
                rewards[i] = self._no_answer(episode)
                if self.scores_groups:
                    pending.append((i, ""))
        if pending and self.scores_groups:
            scored = await self._group_scores(episodes[pending[0][0]].task, pending, episodes)
        else:
            scored = await asyncio.gather(*(self._sample_score(episodes[i], answer) for i, answer in pending))
        for (i, _), reward in zip(pending, scored, strict=True):
            if rewards[i] is None:
                rewards[i] = reward
        return [r if r is not None else Reward.failed("not scored") for r in rewards]

    async def _score_alone(self, episode: Episode) -> Reward:
        if episode.outcome is not None:
            return episode.outcome
        answer = self._final_answer(episode)
        if isinstance(answer, Reward):
            return answer
        if not has_visible_text(answer):
            return self._no_answer(episode)
        return await self._sample_score(episode, answer)

    @staticmethod
    def _final_answer(episode: Episode) -> str | Reward:
        """The final answer with the reasoning split off, or the overlong rule's 0."""
        split = split_reasoning(episode.final)
        reason = overlong_reason(episode.final, split)
        return Reward.zero(reason, overlong=1.0) if reason else split.answer

    def _no_answer(self, episode: Episode) -> Reward:
        return Reward(min(0.0, self.no_answer_value(episode.task)), reason=NO_ANSWER)

    async def _sample_score(self, episode: Episode, answer: str) -> Reward:
        try:
            reward = await self.ascore_episode(episode, answer)
        except Exception as exc:
            return Reward.failed(f"{type(self).__name__} verifier raised {type(exc).__name__}: {exc}")
        if not isinstance(reward, Reward):
            return Reward.failed(f"{type(self).__name__}.ascore returned {type(reward).__name__}, not Reward")
        return reward

    async def _group_scores(
        self, task: TaskT, pending: list[tuple[int, str]], episodes: Sequence[Episode]
    ) -> list[Reward]:
        name = type(self).__name__
        try:
            rewards = await self.ascore_group(
                task, [a for _, a in pending], [episodes[i] for i, _ in pending]
            )
        except Exception as exc:
            return [Reward.failed(f"{name} group scorer raised {type(exc).__name__}: {exc}")] * len(pending)
        if not isinstance(rewards, list) or len(rewards) != len(pending):
            got = len(rewards) if isinstance(rewards, list) else type(rewards).__name__
            return [
                Reward.failed(f"{name}.ascore_group returned {got} rewards for {len(pending)} answers")
            ] * len(pending)
        return [
            r if isinstance(r, Reward) else Reward.failed(f"{name}.ascore_group returned a non-Reward")
            for r in rewards
        ]

    async def areward(self, task: Row | Loaded[TaskT], completion: str | Completion) -> Reward:
        """Score one single-turn response to ``task`` (a row or a ``Loaded``) through the scoring path."""
        return (await self.ascore_responses(task, [completion]))[0]

    async def ascore_responses(
        self, task: Row | Loaded[TaskT], responses: Sequence[str | Completion]
    ) -> list[Reward]:
        """Score G single-turn responses to one task (a row, loaded once, or a ``Loaded``) as a group."""
        loaded = self.load(task)
        episodes = []
        for response in responses:
            episode = await self.astart(loaded)
            await self.aadvance(episode, response)
            episodes.append(episode)
        try:
            return await self.ascore_episodes(episodes)
        finally:
            await asyncio.gather(*(self.aend(e) for e in episodes))

    def parse_tool_calls(self, text: str) -> Any:
        """Parse tool calls from ``text`` with this env's ``tool_parser``."""
        return tool_parsers.get(self.tool_parser)(text)

    # ----- gymnasium API, async first -----------------------------------------------------------

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(seed)
        options = options or {}
        if "task" in options:
            item: Row | Loaded[TaskT] = options["task"]
        elif self.tasks is not None:
            item = self.tasks.sample(self.np_random)
        else:
            raise TaskError("no task: pass options={'task': row} or construct the env with tasks=")
        await self._end_current()
        episode = self.episode = await self.astart(self.load(item))
        info = {"task_id": episode.task_id, "thinking": episode.thinking, "max_turns": episode.max_turns}
        return list(episode.messages), info

    async def astep(
        self, action: str | Completion
    ) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        episode = self.episode
        if episode is None or episode.done:
            raise RuntimeError("step() called before reset() or after the episode ended")
        turn = await self.aadvance(episode, action)
        reward: Reward | None = None
        if episode.done:
            reward = episode.outcome if self.scores_groups else (await self.ascore_episodes([episode]))[0]
            await self.aend(episode)
        info = {**turn.info, "reward": reward, "turn": episode.turns, "task_id": episode.task_id}
        value = reward.value if reward is not None else 0.0
        return list(turn.observation), value, episode.terminated, episode.truncated, info

    async def _end_current(self) -> None:
        """Release the gymnasium episode in play, if it has not ended (an ended one is released)."""
        episode, self.episode = self.episode, None
        if episode is not None and not episode.done:
            await self.aend(episode)

    async def aclose(self) -> None:
        """Release the run-wide resources (clients, pools); subclasses extend it and call ``super``."""
        await self._end_current()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return run_sync(self.areset(seed=seed, options=options))

    def step(self, action: str | Completion):
        return run_sync(self.astep(action))

    def close(self) -> None:
        run_sync(self.aclose())


_local = threading.local()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from sync code, on a loop kept per thread.

    Inside a running event loop (a notebook, an async app) it runs on a worker thread instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop = getattr(_local, "loop", None)
        if loop is None or loop.is_closed():
            loop = _local.loop = asyncio.new_event_loop()
        return loop.run_until_complete(coro)
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(_capture(run_sync, coro)))
    thread.start()
    thread.join()
    outcome, value = result[0]
    if outcome == "error":
        raise value
    return value


def _capture(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except BaseException as exc:
        return "error", exc
