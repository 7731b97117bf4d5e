"""TRL: any cascade env, or a weighted mix of them, inside TRL's ``GRPOTrainer``.

``CascadeSpec(envs)`` gives the trainer what it needs, as ``**spec.trainer_kwargs``:

- ``train_dataset``: one row per task (a ``datasets.Dataset``): ``prompt`` (the env's opening chat
  messages), ``cascade_env`` (the env id) and ``cascade_index`` (the task's place in that env's
  tasks), which is how a completion finds its task again. A mix samples its rows by weight.
- ``reward_funcs``: one reward function, ``cascade``. TRL calls it once per generation batch
  with every completion, the ``num_generations`` completions of a prompt next to each other; it
  cuts the batch into those groups (runs of the same task) and scores each group through the
  env's one scoring path (``Env.ascore_responses`` -> ``ascore_episodes``), so a group-scored env
  (GenRM) compares the answers of a group with each other. A masked reward (a verifier or judge
  failure) is returned as ``None``: TRL turns it into NaN, leaves it out of the group's mean and
  std and gives the sample advantage 0 (``GRPOTrainer._generate_and_score_completions``, TRL 1.x).
- ``rollout_func`` (multi-turn envs: workplace, SWE; chosen when a mix holds one, or with
  ``rollout=True``): the episodes are played by our ``RolloutRunner``, one group per task, with a
  policy over the trainer's current model (``HFPolicy`` on the unwrapped model, TRL's own
  generation being single-turn); each episode's ``Trajectory`` gives ``prompt_ids``,
  ``completion_ids`` (every turn and the env tokens between them, exactly as generated: no
  re-tokenisation), ``env_mask`` (1 on sampled tokens, 0 on tool results and template tokens)
  and ``logprobs``; its reward travels in the ``cascade_reward`` field and the reward function
  passes it on. See ``_trl_rollout.py``.
- ``callbacks``: a callback that reads the tokenizer's end tokens when training begins (a
  completion that does not end with one was cut at the length limit: the overlong rule scores it 0).

Prompts: in reward mode TRL renders the prompt with the model's chat template and the config's
``chat_template_kwargs`` (``spec.chat_template_kwargs`` says the envs' thinking mode); in rollout
mode our renderer does, as in our own trainer. All env work runs on one event loop of the spec's
own (a daemon thread), so judge clients and pools live on one loop; ``close()`` releases them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from .._extras import require

require("trl", "cascade_envs.integrations.trl")
require("datasets", "cascade_envs.integrations.trl")

from datasets import Dataset  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from ..core import CascadeError, Completion, Message, Reward  # noqa: E402
from ..data import Loaded  # noqa: E402
from ..defaults import DEFAULT_CONCURRENCY  # noqa: E402
from ..env import Env  # noqa: E402
from ..mix import EnvMix, load_mix_file, parse_mix  # noqa: E402
from ..policies.decoding import end_token_ids  # noqa: E402
from ..policy import Policy  # noqa: E402
from ._trl_rollout import ENV_COLUMN, INDEX_COLUMN, REWARD_FIELD, TASK_KEY, rollout, runs  # noqa: E402

__all__ = ["ENV_COLUMN", "INDEX_COLUMN", "REWARD_FIELD", "TASK_KEY", "CascadeReward", "CascadeSpec", "runs"]

T = TypeVar("T")
log = logging.getLogger("cascade_envs.integrations.trl")

EnvsArg = str | os.PathLike[str] | Sequence[str] | Mapping[str, Any] | EnvMix
PolicyArg = Policy | Callable[[Any], Policy] | None


class CascadeSpec:
    """What ``GRPOTrainer`` needs to train on ``envs``: see the module docstring.

    ``envs``: an env id, a list of ids (equal weights), a mix mapping (``{ID: WEIGHT}`` or
    ``{ID: {weight: W, kwargs: {...}}}``), a mix YAML file, or an ``EnvMix`` (which stays its
    maker's to close). ``num_rows``: dataset rows (default: one per task of every env; a single
    env keeps file order). ``rollout``: force (True) or refuse (False) the multi-turn path; the
    default takes it when some env has more than one turn. ``policy``: rollout mode only, a
    ``Policy`` or a function of the trainer that makes one, instead of the trainer's own model.
    ``score_timeout_s``: wall-clock bound of scoring one group (past it the group is masked).
    """

    def __init__(
        self,
        envs: EnvsArg,
        *,
        env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        num_rows: int | None = None,
        seed: int = 0,
        rollout: bool | None = None,
        policy: PolicyArg = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        score_timeout_s: float = 3600.0,
        episode_timeout_s: float | None = None,
        max_episode_tokens: int | None = None,
        tokenizer: Any = None,
    ) -> None:
        if not score_timeout_s > 0:
            raise ValueError("score_timeout_s must be positive")
        self._loop = _LoopThread()
        self.mix, self._owns_mix = _as_mix(envs, env_kwargs, seed), not isinstance(envs, EnvMix)
        self.envs = self.mix.envs
        multi_turn = [i for i in self.mix.ids if self.envs[i].max_turns > 1]
        if rollout is False and multi_turn:
            raise CascadeError(f"{', '.join(multi_turn)} play(s) several turns: they need rollout=True")
        self.rollout = bool(multi_turn) if rollout is None else rollout
        if policy is not None and not self.rollout:
            raise CascadeError("policy= is used by the multi-turn path only: pass rollout=True")
        self.policy = policy
        self.concurrency, self.score_timeout_s = concurrency, float(score_timeout_s)
        self.episode_timeout_s, self.max_episode_tokens = episode_timeout_s, max_episode_tokens
        self.end_ids: set[int] | None = end_token_ids(None, tokenizer) if tokenizer is not None else None
        self._num_rows, self._dataset = num_rows, None
        self.reward = CascadeReward(self)
        self.callback = _EndTokensCallback(self)

    # ----- what the trainer takes --------------------------------------------------------------------

    @property
    def train_dataset(self) -> Dataset:
        """The rows (built once): ``prompt``, ``cascade_env``, ``cascade_index``, ``task_id``."""
        if self._dataset is None:
            self._dataset = Dataset.from_list(self._rows())
        return self._dataset

    @property
    def reward_funcs(self) -> list[Callable[..., list[float | None]]]:
        return [self.reward]

    @property
    def rollout_func(self) -> Callable[[list[Any], Any], dict[str, Any]] | None:
        if not self.rollout:
            return None
        return lambda prompts, trainer: rollout(self, prompts, trainer)

    @property
    def callbacks(self) -> list[TrainerCallback]:
        return [self.callback]

    @property
    def trainer_kwargs(self) -> dict[str, Any]:
        """``GRPOTrainer(model, args=config, **spec.trainer_kwargs)``."""
        kwargs: dict[str, Any] = {
            "train_dataset": self.train_dataset,
            "reward_funcs": self.reward_funcs,
            "callbacks": self.callbacks,
        }
        if self.rollout:
            kwargs["rollout_func"] = self.rollout_func
        return kwargs

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        """For ``GRPOConfig(chat_template_kwargs=...)`` in reward mode: the envs' thinking mode."""
        modes = {self.envs[i].thinking for i in self.mix.ids}
        if len(modes) > 1:
            log.warning("the envs of this mix differ in thinking mode; TRL renders every prompt alike")
        return {"enable_thinking": all(modes)}

    # ----- tasks and the event loop ------------------------------------------------------------------

    def task(self, env_id: str, index: int) -> tuple[Env[Any], Loaded[Any]]:
        """The env and loaded task a row names (a ``CascadeError`` for a row this spec did not make)."""
        if env_id not in self.mix.weights:
            raise CascadeError(
                f"{ENV_COLUMN}={env_id!r} is not an env of this spec ({', '.join(self.mix.ids)})"
            )
        env = self.envs[env_id]
        tasks = env.tasks
        if (
            tasks is None
            or isinstance(index, bool)
            or not isinstance(index, int)
            or not 0 <= index < len(tasks)
        ):
            raise CascadeError(f"{INDEX_COLUMN}={index!r} is not a task of {env_id}")
        return env, tasks[index]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the spec's event loop and wait for it."""
        return self._loop.run(coro)

    def close(self) -> None:
        """Close the envs this spec made (with their clients and pools) and stop its event loop."""
        if self._owns_mix and self._loop.alive:
            self._loop.run(self.envs.aclose())
        self._loop.close()

    def __enter__(self) -> CascadeSpec:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self) -> list[dict[str, Any]]:
        ids = self.mix.ids
        if len(ids) == 1 and self._num_rows is None:
            tasks = self.envs[ids[0]].tasks or ()
            items: list[tuple[str, Loaded[Any]]] = [(ids[0], t) for t in tasks]
        else:
            total = sum(len(self.envs[i].tasks or ()) for i in ids)
            items = self.mix.sample(self._num_rows if self._num_rows is not None else total)
        index = {i: {id(t): n for n, t in enumerate(self.envs[i].tasks or ())} for i in ids}
        rows = []
        for env_id, loaded in items:
            n = index[env_id][id(loaded)]
            prompt = [dict(m) for m in self.envs[env_id].prompt(loaded.task)]
            if self.rollout:  # rollout_func sees only prompts: the first message names the task
                for k, message in enumerate(prompt):
                    message[TASK_KEY] = f"{env_id}#{n}" if k == 0 else None
            rows.append({"prompt": prompt, ENV_COLUMN: env_id, INDEX_COLUMN: n, "task_id": loaded.task_id})
        return rows


class CascadeReward:
    """The reward function (TRL's ``reward_funcs`` entry): see the module docstring."""

    __name__ = "cascade"

    def __init__(self, spec: CascadeSpec) -> None:
        self.spec = spec

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: list[list[int]] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        n = len(completions)
        if REWARD_FIELD in columns:  # rollout mode: the episodes were scored as they were played
            rewards: list[Reward] = list(columns[REWARD_FIELD])
        else:
            rewards = self.score(completions, completion_ids, columns)
        if len(rewards) != n:
            raise CascadeError(f"got {len(rewards)} rewards for {n} completions")
        if log_metric is not None and n:
            log_metric("cascade/masked_fraction", sum(r.masked for r in rewards) / n)
            env_ids = columns.get(ENV_COLUMN)
            if isinstance(env_ids, list) and len(env_ids) == n and len(set(env_ids)) > 1:
                for env_id in sorted(set(env_ids)):  # a mix: each env's mean reward, masked ones left out
                    values = [
                        r.value for r, e in zip(rewards, env_ids, strict=True) if e == env_id and not r.masked
                    ]
                    if values:
                        log_metric(f"cascade/{env_id}/reward", sum(values) / len(values))
        return [None if r.masked else r.value for r in rewards]

    def score(
        self, completions: list[Any], completion_ids: list[list[int]] | None, columns: Mapping[str, Any]
    ) -> list[Reward]:
        """Score a batch: runs of the same task are one group each, scored by its env."""
        n = len(completions)
        env_ids, indexes = columns.get(ENV_COLUMN), columns.get(INDEX_COLUMN)
        if (
            not isinstance(env_ids, list)
            or not isinstance(indexes, list)
            or not len(env_ids) == n == len(indexes)
        ):
            raise CascadeError(
                f"the batch has no {ENV_COLUMN}/{INDEX_COLUMN} columns: train on spec.train_dataset"
            )
        if completion_ids is None or len(completion_ids) != n:
            raise CascadeError("TRL passed no completion_ids: cannot tell a finished answer from a cut one")
        ends = self.spec.end_ids
        if ends is None:
            raise CascadeError(
                "the end tokens are unknown: pass callbacks=spec.callbacks (in **spec.trainer_kwargs) "
                "or CascadeSpec(..., tokenizer=tokenizer)"
            )
        responses = [
            Completion(_text(c), "stop" if ids and ids[-1] in ends else "length")
            for c, ids in zip(completions, completion_ids, strict=True)
        ]
        keys = list(zip(env_ids, indexes, strict=True))
        groups = [(self.spec.task(*keys[s]), s, e) for s, e in runs(keys)]
        scored = self.spec.run(
            _gather(self._group(env, loaded, responses[s:e]) for (env, loaded), s, e in groups)
        )
        return [reward for group in scored for reward in group]

    async def _group(self, env: Env[Any], loaded: Loaded[Any], responses: list[Completion]) -> list[Reward]:
        try:
            return await asyncio.wait_for(env.ascore_responses(loaded, responses), self.spec.score_timeout_s)
        except TimeoutError:
            error = f"scoring the group took more than {self.spec.score_timeout_s:g} s"
        except Exception as exc:  # ascore_responses masks scorer errors; this guards the rest
            error = f"scoring raised {type(exc).__name__}: {exc}"
        return [Reward.failed(error)] * len(responses)


def _text(completion: Any) -> str:
    """A completion's text: a string, or TRL's ``[{"role": "assistant", "content": ...}]``; a parsed
    reasoning field (``reasoning_content``) goes back in front as a ``<think>`` block."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        message: Message = completion[-1]
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        return f"<think>{reasoning}</think>{text}" if isinstance(reasoning, str) and reasoning else text
    raise CascadeError(f"cannot read a completion of type {type(completion).__name__}")


async def _gather(coros: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    return list(await asyncio.gather(*coros))


def _as_mix(envs: EnvsArg, env_kwargs: Mapping[str, Mapping[str, Any]] | None, seed: int) -> EnvMix:
    if isinstance(envs, EnvMix):
        if env_kwargs:
            raise CascadeError("env_kwargs= cannot change an EnvMix's envs: give them to the EnvMix")
        return envs
    kwargs = {k: dict(v) for k, v in (env_kwargs or {}).items()}
    if isinstance(envs, (str, os.PathLike)) and str(envs).endswith((".yaml", ".yml")):
        weights, file_kwargs = load_mix_file(os.fspath(envs))
    elif isinstance(envs, Mapping):
        weights, file_kwargs = parse_mix(envs, source="envs")
    elif isinstance(envs, str):
        weights, file_kwargs = {envs: 1.0}, {}
    else:
        weights, file_kwargs = {str(i): 1.0 for i in cast(Sequence[str], envs)}, {}
    merged = {i: {**file_kwargs.get(i, {}), **kwargs.get(i, {})} for i in weights}
    return EnvMix(weights, seed=seed, env_kwargs=merged)


class _EndTokensCallback(TrainerCallback):
    """Reads the end-of-generation token ids (tokenizer and model) when training begins."""

    def __init__(self, spec: CascadeSpec) -> None:
        self.spec = spec

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        tokenizer = kwargs.get("processing_class")
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        if tokenizer is not None:
            self.spec.end_ids = end_token_ids(kwargs.get("model"), tokenizer)


class _LoopThread:
    """An event loop on a daemon thread: every coroutine of one spec runs there."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="cascade-trl", daemon=True
                )
                self._thread.start()
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def close(self) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            loop.close()
