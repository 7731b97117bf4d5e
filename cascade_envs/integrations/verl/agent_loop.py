"""verl's agent loop ``"cascade"``: any cascade env, played token in, token out over verl's server client.

verl makes one loop object per sample and calls ``run(sampling_params, **row_fields)``. The row comes
from ``extra_info.task_json`` and the env id from ``data_source`` (``export_verl``). The episode is
played with the env's own API (``astart``/``aadvance``/``ascore_episodes``). Tokens never go round
text: the first prompt is verl's Continuous Token rendering of the env's opening messages; each model
turn appends exactly the ids the server sampled; each env answer (tool results, user turns) appends
the Continuous Token ids of just those messages, so the prompt of turn k+1 is the ids of turn k, its
response ids and the env's message ids. Every turn is recorded in a ``Trajectory``, whose one
sequence gives the ``response_mask`` (our loss mask: 1 on sampled tokens, 0 on env tokens) and the
logprobs (verl's, 0.0 on env tokens).

Rewards: a per-sample env's reward is ``reward_score``; a masked one zeroes the whole
``response_mask`` (scored 0.0, which ``cascade_grpo`` keeps out of the group statistics). A
group-scored env (GenRM) is scored by ``CascadeAgentLoopManager`` once the group is back. The reward's
reason and masking are in ``extra_fields["reward_extra_info"]`` (logged by verl).

Config (``agent_loop_config_path`` YAML, keys passed to the constructor): ``env_kwargs``
(``{env_id: {...}}``), ``episode_timeout_s``, ``model_family`` (verl's Continuous Token family, e.g.
``qwen`` for a ChatML model whose ``model_type`` verl does not know: its default builder drops the
``"\n"`` the template puts after ``<|im_end|>``, so the tokens would drift from the transcript).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
import time
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from omegaconf import DictConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

from ...core import Completion, Reward, TaskError
from ...env import Env, Episode
from ...policies.decoding import end_token_ids
from ...policy import PolicyError
from ...reasoning import EMPTY_THINK
from ...trajectory import Trajectory, TurnRecord
from ._envs import env_set, sample_task
from .scoring import reward_result

log = logging.getLogger("cascade_envs.integrations.verl")

MASK_SAFE_ESTIMATORS = frozenset({"cascade_grpo", "gae", "reinforce_plus_plus", "remax"})
"""Estimators under which a masked sample (all-zero response mask) never enters another's baseline."""
MANAGER = "cascade_envs.integrations.verl.manager.CascadeAgentLoopManager"
_EMPTY_THINK_AT_END = re.compile(r"<think>\s*</think>\s*$")


class _Tokens:
    """The runtime token stream of one episode: verl's Continuous Token ids, mask and logprobs."""

    def __init__(self, prompt_ids: list[int]) -> None:
        self.prompt_ids = list(prompt_ids)
        self.ids = list(prompt_ids)
        self.mask: list[int] = []
        self.logprobs: list[float] | None = []

    @property
    def response_len(self) -> int:
        return len(self.ids) - len(self.prompt_ids)


@register("cascade")
class CascadeAgentLoop(AgentLoopBase):
    """Plays one cascade episode per sample; see the module docstring."""

    def __init__(
        self,
        *args: Any,
        env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        episode_timeout_s: float | None = None,
        model_family: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if model_family:  # a Continuous Token family verl cannot infer from config.json's model_type
            self.continuous_token_builder = create_continuous_token_builder(
                self.tokenizer,
                model_family=model_family,
                chat_template_kwargs=self.apply_chat_template_kwargs,
                processor=self.processor,
            )
        if isinstance(env_kwargs, DictConfig):
            env_kwargs = OmegaConf.to_container(env_kwargs, resolve=True)
        self.env_kwargs = {k: dict(v) for k, v in (env_kwargs or {}).items()}
        self.episode_timeout_s = episode_timeout_s
        self.response_length = int(self.rollout_config.response_length)
        self.eos_ids = end_token_ids(None, self.tokenizer)
        estimator = OmegaConf.select(self.config, "algorithm.adv_estimator")
        if estimator is not None and str(getattr(estimator, "value", estimator)) not in MASK_SAFE_ESTIMATORS:
            raise ValueError(
                f"algorithm.adv_estimator={estimator} would count a masked cascade reward as 0 in its "
                "group baseline: set algorithm.adv_estimator=cascade_grpo (verl's GRPO without masked samples)"
            )

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        timing = {"generate_sequences": 0.0, "tool_calls": 0.0}
        tokens: _Tokens | None = None
        trajectory = Trajectory()
        episode: Episode | None = None
        env: Env | None = None
        reward: Reward | None = None
        env_id = str(kwargs.get("data_source", ""))
        try:
            env_id, row = sample_task(kwargs.get("data_source"), kwargs.get("extra_info"))
            env = env_set(self.env_kwargs).env(env_id)
        except Exception as exc:
            reward = Reward.failed(f"{type(exc).__name__}: {exc}")
        if env is not None:
            if env.scores_groups:
                self._require_group_manager(env_id)
            try:
                episode = await env.astart(env.load(row))
                tokens = _Tokens(await self._first_prompt(episode))
                params = {"sampling_params": sampling_params, "priority": int(kwargs.get("priority", 0))}
                await self._play_within_deadline(env, episode, tokens, trajectory, params, timing)
                if not env.scores_groups:
                    reward = (await env.ascore_episodes([episode]))[0]
            except Exception as exc:
                reward = Reward.failed(f"{type(exc).__name__}: {exc}")
            finally:
                if episode is not None:
                    await env.aend(episode)
        return await self._output(env_id, env, episode, tokens, trajectory, reward, timing, kwargs)

    # ----- playing --------------------------------------------------------------------------------

    async def _first_prompt(self, episode: Episode) -> list[int]:
        """verl's Continuous Token rendering of the opening messages; a prompt over
        ``rollout.prompt_length`` is an error (verl would cut its head, e.g. the tools), not truncated."""
        messages = list(episode.messages)
        ids = await self.loop.run_in_executor(
            None, lambda: self.continuous_token_builder.build_initial_tokens(messages)
        )
        ids = list(ids) + self._no_think_ids(episode, list(ids))
        limit = int(self.rollout_config.prompt_length)
        if len(ids) > limit:
            raise TaskError(f"the prompt has {len(ids)} tokens, over rollout.prompt_length={limit}")
        return ids

    def _no_think_ids(self, episode: Episode, ids: list[int]) -> list[int]:
        """The empty think block a non-thinking episode's prompt ends with (unless the template wrote it)."""
        if episode.thinking or _EMPTY_THINK_AT_END.search(self.tokenizer.decode(ids[-16:])):
            return []
        return list(self.tokenizer.encode(EMPTY_THINK, add_special_tokens=False))

    async def _play_within_deadline(self, env: Env, episode: Episode, *args: Any) -> None:
        deadline = env.episode_timeout_s or self.episode_timeout_s
        if not deadline:
            await self._play(env, episode, *args)
            return
        scope = asyncio.timeout(deadline)
        try:
            async with scope:
                await self._play(env, episode, *args)
        except TimeoutError:
            if not scope.expired() or episode.done:
                raise
            await env.atruncate(episode, f"episode deadline of {deadline:g} s reached")

    async def _play(
        self,
        env: Env,
        episode: Episode,
        tokens: _Tokens,
        trajectory: Trajectory,
        params: dict[str, Any],
        timing: dict[str, float],
    ) -> None:
        """Model turns and env answers until the episode ends; ``params``: verl's sampling params and priority."""
        request_id = uuid4().hex  # one per episode: verl keeps its turns on one server
        sampling_params, priority = params["sampling_params"], params["priority"]
        while not episode.done:
            budget = self.response_length - tokens.response_len
            if budget < 1:
                await env.atruncate(
                    episode, f"rollout.response_length of {self.response_length} tokens reached"
                )
                return
            started = time.perf_counter()
            out = await self.server_manager.generate(
                request_id=request_id,
                prompt_ids=list(tokens.ids),
                sampling_params={**sampling_params, "max_tokens": budget},
                priority=priority,
            )
            timing["generate_sequences"] += time.perf_counter() - started
            if out.stop_reason == "aborted":
                raise PolicyError("the rollout server aborted the request")
            completion = self._completion(list(out.token_ids), out.log_probs, budget, tokens.ids)
            has_logprobs = tokens.logprobs is not None and completion.logprobs is not None
            merged, tokens.mask, logprobs = await self.ct_merge_assistant_token(
                tokens.ids,
                list(out.token_ids),
                tokens.mask,
                tokens.logprobs if has_logprobs else None,
                assistant_logprobs=completion.logprobs if has_logprobs else None,
            )
            tokens.ids, tokens.logprobs = merged.token_ids, logprobs
            seen = len(episode.messages) + 1  # with the assistant message aadvance appends
            started = time.perf_counter()
            await env.aadvance(episode, completion)
            timing["tool_calls"] += time.perf_counter() - started
            trajectory.turns.append(
                TurnRecord(
                    completion.prompt_token_ids,
                    completion.token_ids,
                    completion.logprobs,
                    completion.finish_reason,
                )
            )
            if episode.done:
                return
            merged, tokens.mask, tokens.logprobs = await self.ct_merge_context_msg(
                list(episode.messages[:seen]),
                list(episode.messages),
                tokens.ids,
                tokens.mask,
                tokens.logprobs,
            )
            tokens.ids = merged.token_ids
            extra = self._no_think_ids(episode, tokens.ids)
            tokens.ids += extra
            tokens.mask += [0] * len(extra)
            if tokens.logprobs is not None:
                tokens.logprobs += [0.0] * len(extra)

    def _completion(
        self, ids: list[int], logprobs: list[float] | None, budget: int, prompt_ids: list[int]
    ) -> Completion:
        ended = bool(ids) and ids[-1] in self.eos_ids
        finish = "stop" if ended or len(ids) < budget else "length"
        text = self.tokenizer.decode(ids[:-1] if ended else ids, skip_special_tokens=False)
        return Completion(
            text,
            finish_reason=finish,
            token_ids=ids,
            logprobs=list(logprobs) if logprobs is not None and len(logprobs) == len(ids) else None,
            prompt_token_ids=list(prompt_ids),
        )

    def _require_group_manager(self, env_id: str) -> None:
        configured = OmegaConf.select(self.config, "actor_rollout_ref.rollout.agent.agent_loop_manager_class")
        from .manager import CascadeAgentLoopManager

        if configured:
            module, _, name = str(configured).rpartition(".")
            cls = getattr(importlib.import_module(module), name, None)
            if isinstance(cls, type) and issubclass(cls, CascadeAgentLoopManager):
                return
        raise ValueError(
            f"{env_id} scores a prompt's G responses together: set "
            f"actor_rollout_ref.rollout.agent.agent_loop_manager_class={MANAGER}"
        )

    # ----- the output -----------------------------------------------------------------------------

    async def _output(
        self,
        env_id: str,
        env: Env | None,
        episode: Episode | None,
        tokens: _Tokens | None,
        trajectory: Trajectory,
        reward: Reward | None,
        timing: dict[str, float],
        kwargs: dict[str, Any],
    ) -> AgentLoopOutput:
        if tokens is None:  # nothing was played: the row's own prompt, one masked end token
            tokens = _Tokens(await self._fallback_prompt(kwargs))
        prompt, response, mask, logprobs = self._sequence(tokens, trajectory)
        if not response:  # verl needs a token to put the reward on; it is never trained
            response, mask = [self.tokenizer.eos_token_id or 0], [0]
            logprobs = [0.0] if logprobs is not None else None
        group = env is not None and env.scores_groups and reward is None
        masked = reward is not None and reward.masked
        if masked:
            mask = [0] * len(mask)
        info = reward_result(reward) if reward is not None else reward_result(Reward(float("nan")))
        info["cascade_masked"] = masked
        final = episode.final if episode is not None and episode.completions else Completion("")
        extra = {
            "cascade_env_id": env_id,
            "cascade_group": bool(group),
            "cascade_answer": str(final),
            "cascade_finish": final.finish_reason or "",
            "reward_extra_info": {k: info[k] for k in ("cascade_masked", "cascade_reason")},
            "turn_scores": [],
            "tool_rewards": [],
        }
        score = float("nan") if group else (0.0 if masked or reward is None else float(reward.value))
        messages = episode.messages if episode is not None else []
        return AgentLoopOutput(
            prompt_ids=prompt,
            response_ids=response,
            response_mask=mask,
            response_logprobs=logprobs,
            reward_score=score,
            num_turns=sum(m.get("role") != "system" for m in messages),
            metrics={**timing, "num_preempted": -1},
            extra_fields=extra,
        )

    def _sequence(
        self, tokens: _Tokens, trajectory: Trajectory
    ) -> tuple[list[int], list[int], list[int], list[float] | None]:
        """Prompt, response, loss mask and logprobs: our trajectory's one sequence (else verl's CT stream)."""
        sequences = trajectory.sequences()
        n = self.response_length
        if len(sequences) == 1 and sequences[0].prompt_ids == tokens.prompt_ids:
            seq = sequences[0]
            logprobs = seq.logprobs[:n] if seq.logprobs is not None else None
            return seq.prompt_ids, seq.response_ids[:n], seq.loss_mask[:n], logprobs
        if trajectory.turns:
            log.warning("the Continuous Token builder rewrote earlier tokens; using its token stream as is")
        end = len(tokens.mask)
        while end and not tokens.mask[end - 1]:  # env tokens after the last model turn train nothing
            end -= 1
        response = tokens.ids[len(tokens.prompt_ids) :][:end]
        logprobs = tokens.logprobs[:end][:n] if tokens.logprobs is not None else None
        return tokens.prompt_ids, response[:n], tokens.mask[:end][:n], logprobs

    async def _fallback_prompt(self, kwargs: dict[str, Any]) -> list[int]:
        raw = kwargs.get("raw_prompt")
        try:
            if raw is not None and len(raw):
                return list(await self.ct_build_initial_tokens(list(raw)))
        except Exception as exc:
            log.warning("cannot render the sample's raw_prompt: %s", exc)
        return [self.tokenizer.eos_token_id or 0]
