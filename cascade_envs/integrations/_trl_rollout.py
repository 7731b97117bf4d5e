"""The multi-turn path of the TRL spec: a ``rollout_func`` over our ``RolloutRunner``.

TRL calls ``rollout_func(prompts, trainer)`` with its generation batch's prompts, each prompt
``num_generations`` times in a row, and wants one completion back per prompt. The runs of one task
(the ``cascade_task`` key on each prompt's first message) are played as one group by the runner,
which scores the group through the env's scoring path (``ascore_episodes``, group-scored envs
included) as it does for our own trainer.

Generation: TRL's own is single-turn (``_generate_single_turn``), so the episodes are played with
a ``Policy`` over the trainer's current model: ``HFPolicy`` on the model that TRL's
``unwrap_model_for_generation`` gives (one device, DDP, or DeepSpeed ZeRO-3 with its weights
gathered). Not with ``use_vllm``: TRL's ``vllm_generation.generate`` is a collective call across
processes, which the independent turns of episodes cannot line up with; pass ``policy=`` (a
``Policy``, or a function of the trainer making one) for another engine.

Tokens: each episode's ``Trajectory.sequences()`` is its training row, the token ids the policy
saw and sampled (no re-tokenisation): ``prompt_ids`` (the first turn's prompt), ``completion_ids``
(every turn, with the env's and the template's tokens between them), ``env_mask`` (1 on sampled
tokens) and ``logprobs`` (0.0 on env tokens). When the chat template rewrites the history (no
single sequence), the row is the last turn alone (its prompt is the whole history), with a warning.
An episode without token ids (a failed episode, a text-only policy) trains on nothing (a masked
placeholder) but keeps its reward.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, Protocol, TypeVar, cast

from ..data import Loaded
from ..defaults import DEFAULT_MAX_TOKENS
from ..env import Env
from ..env_set import EnvSet
from ..policy import Policy, SamplingParams, render_chat_prompt
from ..rollout.runner import EpisodeResult, RolloutRunner
from ..trajectory import TokenSequence

T = TypeVar("T")


class CascadeSpec(Protocol):
    """What the rollout needs of ``trl.CascadeSpec`` (named apart here: no import cycle)."""

    envs: EnvSet
    policy: Any
    concurrency: int
    episode_timeout_s: float | None
    max_episode_tokens: int | None

    def task(self, env_id: str, index: int) -> tuple[Env[Any], Loaded[Any]]: ...

    def run(self, coro: Coroutine[Any, Any, T]) -> T: ...


log = logging.getLogger("cascade_envs.integrations.trl")
_warned: set[str] = set()

ENV_COLUMN = "cascade_env"
INDEX_COLUMN = "cascade_index"
TASK_KEY = "cascade_task"
"""Rollout mode: the key on a prompt's first message that names its task (``rollout_func`` sees only prompts)."""
REWARD_FIELD = "cascade_reward"
"""Rollout mode: the per-completion extra field that carries the episode's reward to ``reward_funcs``."""


def runs(keys: Sequence[Any]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of equal consecutive keys: TRL's groups of one prompt."""
    out: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start]:
            out.append((start, i))
            start = i
    return out


def rollout(spec: CascadeSpec, prompts: list[Any], trainer: Any) -> dict[str, Any]:
    """TRL's ``rollout_func``: play the batch's episodes and return their token rows and rewards."""
    keys = [_task_key(prompt) for prompt in prompts]
    groups = []
    for start, end in runs(keys):
        env_id, _, index = keys[start].rpartition("#")
        _, loaded = spec.task(env_id, int(index))
        groups.append((env_id, loaded, end - start))
    args = trainer.args
    sampling = SamplingParams(
        max_tokens=int(args.max_completion_length or DEFAULT_MAX_TOKENS),
        temperature=float(args.temperature),
        top_p=float(args.top_p),
    )
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    with _policy(spec, trainer, tokenizer, len(prompts)) as policy:
        results = spec.run(_play(spec, policy, sampling, groups))
    rows = [_row(spec, result, tokenizer) for result in results]
    with_logprobs = all(seq.logprobs is not None for seq in rows)
    return {
        "prompt_ids": [seq.prompt_ids for seq in rows],
        "completion_ids": [seq.response_ids for seq in rows],
        "env_mask": [seq.loss_mask for seq in rows],
        "logprobs": [seq.logprobs for seq in rows] if with_logprobs else None,
        REWARD_FIELD: [result.reward for result in results],
        "cascade_turns": [result.turns for result in results],
    }


def _task_key(prompt: Any) -> str:
    from ..core import CascadeError

    first = prompt[0] if isinstance(prompt, list) and prompt else None
    key = first.get(TASK_KEY) if isinstance(first, dict) else None
    if not isinstance(key, str) or "#" not in key or not key.rpartition("#")[2].isdigit():
        raise CascadeError(
            f"a prompt without its {TASK_KEY!r} key: train on spec.train_dataset (rollout mode)"
        )
    return key


async def _play(
    spec: CascadeSpec, policy: Policy, sampling: SamplingParams, groups: list[tuple[str, Any, int]]
) -> list[EpisodeResult]:
    """Play every group (one runner per group size); the episodes in the batch's order."""
    import asyncio

    by_size: dict[int, list[int]] = {}
    for k, (_, _, size) in enumerate(groups):
        by_size.setdefault(size, []).append(k)
    played: dict[int, list[EpisodeResult]] = {}

    async def play(size: int, ks: list[int]) -> None:
        runner = RolloutRunner(
            policy,
            sampling=sampling,
            group_size=size,
            concurrency=spec.concurrency,
            envs=spec.envs,
            episode_timeout_s=spec.episode_timeout_s,
            max_episode_tokens=spec.max_episode_tokens,
        )
        results = await runner.arun([(groups[k][0], groups[k][1]) for k in ks])
        for k, group in zip(ks, results, strict=True):
            played[k] = group.episodes

    await asyncio.gather(*(play(size, ks) for size, ks in by_size.items()))
    return [episode for k in range(len(groups)) for episode in played[k]]


def _row(spec: CascadeSpec, result: EpisodeResult, tokenizer: Any) -> TokenSequence:
    sequences = result.trajectory.sequences()
    if len(sequences) == 1:
        return sequences[0]
    if sequences:
        _warn_once(
            f"prefix:{result.env_id}",
            "%s: the chat template rewrites the history, so each episode trains on its last turn only",
            result.env_id,
        )
        return sequences[-1]
    _warn_once(
        f"tokens:{result.env_id}",
        "%s: an episode has no token ids (%s): it trains on nothing; use a policy that returns token ids",
        result.env_id,
        result.error or "the policy returned none",
    )
    env, loaded = spec.envs[result.env_id], None
    for task in env.tasks or ():
        if task.task_id == result.task_id:
            loaded = task
            break
    messages = env.prompt(loaded.task) if loaded is not None else [{"role": "user", "content": ""}]
    prompt = list(
        tokenizer(render_chat_prompt(tokenizer, messages, env.thinking), add_special_tokens=False)[
            "input_ids"
        ]
    )
    end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.pad_token_id
    return TokenSequence(prompt, [int(end)], [0], [0.0])


@contextlib.contextmanager
def _policy(spec: CascadeSpec, trainer: Any, tokenizer: Any, batch: int) -> Iterator[Policy]:
    """The policy of one rollout call: ``spec.policy`` (kept), one it makes (closed), or the trainer's model."""
    given = spec.policy
    if given is not None and hasattr(given, "agenerate") and not isinstance(given, type):
        yield cast(Policy, given)
        return
    if given is not None:
        made = given(trainer)
        try:
            yield made
        finally:
            spec.run(made.aclose())
        return
    from ..core import CascadeError

    if getattr(trainer, "use_vllm", False):
        raise CascadeError(
            "rollout mode generates with the trainer's model, not TRL's vLLM (its generate is a collective "
            "call that episodes' turns cannot line up with): set use_vllm=False or pass policy="
        )
    if getattr(trainer, "is_fsdp_enabled", False):
        raise CascadeError("rollout mode cannot generate with an FSDP-sharded model: pass policy=")
    from trl.models import unwrap_model_for_generation

    from ..policies.hf import HFPolicy

    args = trainer.args
    with unwrap_model_for_generation(
        trainer.model_wrapped,
        trainer.accelerator,
        gather_deepspeed3_params=getattr(args, "ds3_gather_for_generation", True),
        gradient_checkpointing_kwargs=getattr(args, "gradient_checkpointing_kwargs", None),
    ) as model:
        policy = HFPolicy(model, tokenizer=tokenizer, max_batch_size=max(1, min(batch, 64)))
        try:
            yield policy
        finally:
            spec.run(policy.aclose())


def _warn_once(key: str, message: str, *args: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)
