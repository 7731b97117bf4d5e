"""``CascadeAgentLoopManager``: verl's agent loop manager, plus group scoring of group-scored envs.

verl scores rewards per sample; a GenRM env needs the G responses to a prompt together. This manager
(``actor_rollout_ref.rollout.agent.agent_loop_manager_class=<this class>``) runs verl's rollout, then
scores every group of a group-scored env at once (``score_groups``: responses with the same ``uid``,
through ``Env.ascore_responses``) and writes the rewards into ``rm_scores``; masked rewards zero the
sample's ``response_mask`` (see ``cascade_grpo``). Samples of other envs are left as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopManager
from verl.protocol import DataProto
from verl.utils.ray_utils import auto_await

from ...core import Completion, Reward
from ...env_set import EnvSet
from ._envs import sample_task
from .scoring import reward_result


async def score_groups(output: DataProto, inputs: DataProto, envs: EnvSet) -> int:
    """Score the group-scored samples of ``output`` (rows aligned with ``inputs``) with ``envs``'s
    instances; return how many were scored."""
    flags = output.non_tensor_batch.get("cascade_group")
    if flags is None or not any(bool(f) for f in flags):
        return 0
    uids = inputs.non_tensor_batch["uid"]
    groups: dict[Any, list[int]] = {}
    for i, flag in enumerate(flags):
        if bool(flag):
            groups.setdefault(uids[i], []).append(i)
    answers = output.non_tensor_batch["cascade_answer"]
    finishes = output.non_tensor_batch["cascade_finish"]
    scores = output.batch["rm_scores"]
    response_mask = output.batch["response_mask"]
    masked_col = output.non_tensor_batch.get("cascade_masked")
    reason_col = output.non_tensor_batch.get("cascade_reason")
    for indices in groups.values():
        first = indices[0]
        try:
            sources, infos = inputs.non_tensor_batch["data_source"], inputs.non_tensor_batch["extra_info"]
            env_id, row = sample_task(sources[first], infos[first])
            completions = [Completion(str(answers[i]), str(finishes[i]) or None) for i in indices]
            rewards = await envs.env(env_id).ascore_responses(row, completions)
        except Exception as exc:
            rewards = [Reward.failed(f"{type(exc).__name__}: {exc}")] * len(indices)
        for i, reward in zip(indices, rewards, strict=True):
            result = reward_result(reward)
            last = int(output.batch["attention_mask"][i, -scores.shape[1] :].sum().item()) - 1
            scores[i].zero_()
            scores[i, max(last, 0)] = 0.0 if reward.masked else float(reward.value)
            if reward.masked:
                response_mask[i] = torch.zeros_like(response_mask[i])
            if masked_col is not None:
                masked_col[i] = result["cascade_masked"]
            if reason_col is not None:
                reason_col[i] = result["cascade_reason"]
    return sum(len(v) for v in groups.values())


class CascadeAgentLoopManager(AgentLoopManager):
    """verl's ``AgentLoopManager`` that also scores group-scored cascade envs; see the module docstring."""

    env_kwargs: Mapping[str, Mapping[str, Any]] | None = None

    @auto_await
    async def generate_sequences(self, prompts: DataProto) -> DataProto:
        output = await super().generate_sequences(prompts)
        async with EnvSet(self.env_kwargs) as envs:  # made and closed on this call's event loop
            await score_groups(output, prompts, envs)
        return output
