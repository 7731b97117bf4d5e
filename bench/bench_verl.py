"""Per-episode overhead of the verl agent loop against playing the same episode on our env directly.

Each side plays the same scripted replies (a zero-latency "server" that returns the replies' token
ids), so what is measured is the adapter: verl's ``AgentLoopWorker`` (hydra instantiation, the
Continuous Token rendering of each env message, padding, ``rm_scores``) around our loop, against
``env.astart``/``aadvance``/``ascore_episodes`` with the text alone, and (single-turn) against verl's
own ``single_turn_agent`` on the same row (which scores nothing). Needs the verl venv:

    .venv-verl/bin/python bench/bench_verl.py [--episodes 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import numpy as np
import transformers
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, _agent_loop_registry
from verl.protocol import DataProto
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from cascade_envs import make
from cascade_envs.integrations.verl.export import verl_rows
from cascade_envs.policies.embedded import embedded_model_path

WORKPLACE = "cascade/Workplace-v0"


class Server:
    def __init__(self, tok: Any, turns: list[str]) -> None:
        eos = tok.convert_tokens_to_ids("<|im_end|>")
        self.ids = [tok(t, add_special_tokens=False)["input_ids"] + [eos] for t in turns]
        self.turns: dict[str, int] = {}

    async def generate(self, request_id: str, *, prompt_ids: list[int], **kwargs: Any) -> TokenOutput:
        k = self.turns[request_id] = self.turns.get(request_id, -1) + 1
        ids = self.ids[min(k, len(self.ids) - 1)]
        return TokenOutput(token_ids=ids, log_probs=[-0.1] * len(ids), stop_reason="completed")


def worker(tok: Any, server: Server) -> AgentLoopWorker:
    rollout = {
        "prompt_length": 8192,
        "response_length": 8192,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "calculate_log_probs": True,
        "val_kwargs": {"top_p": 1.0, "top_k": -1, "temperature": 0.0},
        "agent": {"default_agent_loop": "cascade"},
    }
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": rollout},
            "algorithm": {"adv_estimator": "cascade_grpo"},
            "data": {},
        }
    )
    w = AgentLoopWorker.__new__(AgentLoopWorker)
    w.config, w.llm_client, w.teacher_client, w.reward_loop_worker_handles = config, server, None, None
    w.rollout_config, w.dataset_cls = config.actor_rollout_ref.rollout, RLHFDataset
    w.tokenizer, w.processor = tok, None
    w.hf_model_type, w.mm_processor_kwargs, w.distillation_enabled, w.tools = "llama", {}, False, []
    return w


def batch(row: dict[str, Any], n: int, agent: str = "cascade-bench") -> DataProto:
    fields = {
        "data_source": row["data_source"],
        "agent_name": agent,
        "raw_prompt": row["prompt"],
        "extra_info": row["extra_info"],
        "reward_model": row["reward_model"],
    }
    arrays = {}
    for key, value in fields.items():
        arrays[key] = np.empty(n, dtype=object)
        arrays[key][:] = [value] * n
    arrays["index"] = np.arange(n)
    return DataProto.from_dict(non_tensors=arrays)


async def direct(env_id: str, row: dict[str, Any], turns: list[str], n: int) -> float:
    env = make(env_id, max_turns=len(turns) + 1)
    task = json.loads(row["extra_info"]["task_json"])
    start = time.perf_counter()
    for _ in range(n):
        episode = await env.astart(env.load(task))
        for text in turns:
            if episode.done:
                break
            await env.aadvance(episode, text)
        assert (await env.ascore_episodes([episode]))[0].value == 1.0
        await env.aend(episode)
    elapsed = time.perf_counter() - start
    await env.aclose()
    return elapsed / n


def via_verl(
    tok: Any,
    env_id: str,
    row: dict[str, Any],
    turns: list[str],
    n: int,
    batches: int = 1,
    agent: str = "cascade-bench",
) -> float:
    """Seconds per episode of ``batches`` batches of ``n`` episodes through verl's ``AgentLoopWorker``."""
    _agent_loop_registry["cascade-bench"] = {
        **_agent_loop_registry["cascade"],
        "env_kwargs": {env_id: {"max_turns": len(turns) + 1}},
        "model_family": "qwen",
    }
    w = worker(tok, Server(tok, turns))
    asyncio.run(w.generate_sequences(batch(row, 1, agent)))  # warm-up: the env is made, templates compiled
    elapsed = 0.0
    for _ in range(batches):
        w.llm_client = Server(tok, turns)
        start = time.perf_counter()
        out = asyncio.run(w.generate_sequences(batch(row, n, agent)))
        elapsed += time.perf_counter() - start
        assert agent != "cascade-bench" or float(out.batch["rm_scores"].sum()) == n
    return elapsed / (n * batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    args = parser.parse_args()
    tok = transformers.AutoTokenizer.from_pretrained(str(embedded_model_path()), local_files_only=True)
    mcqa = verl_rows("cascade/MCQA-v0", limit=1)[0]
    answer = json.loads(mcqa["extra_info"]["task_json"])["expected_answer"]
    work = next(
        r for r in verl_rows(WORKPLACE) if len(json.loads(r["extra_info"]["task_json"])["solution"]) == 5
    )
    task = json.loads(work["extra_info"]["task_json"])
    calls = [
        f'<tool_call>{{"name": "{c["name"]}", "arguments": {c["arguments"]}}}</tool_call>'
        for c in task["solution"]
    ]
    cases = [
        ("cascade/MCQA-v0", mcqa, [f"<think>Nitrogen.</think>\\boxed{{{answer}}}"]),
        (WORKPLACE, work, [*calls, "All done."]),
    ]
    print(
        f"{'env':24} {'turns':>5} {'env direct':>11} {'cascade loop':>13} {'verl single_turn':>17} {'ratio':>6}"
    )
    for env_id, row, turns in cases:
        ours = asyncio.run(direct(env_id, row, turns, args.episodes))
        loop = via_verl(tok, env_id, row, turns, args.episodes)
        if len(turns) == 1:  # verl's own loop, no reward: the reference cost of one rollout through verl
            ref = via_verl(tok, env_id, row, turns, args.episodes, agent="single_turn_agent")
            tail = f"{ref * 1e3:14.2f} ms {loop / ref:5.2f}x"
        else:
            tail = f"{'-':>17} {'-':>6}"
        print(f"{env_id:24} {len(turns):5d} {ours * 1e3:8.2f} ms {loop * 1e3:10.2f} ms {tail}")
    print("ms per episode; ratio: the cascade loop against verl's own single-turn loop on the same row")


if __name__ == "__main__":
    main()
