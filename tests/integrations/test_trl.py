"""TRL's real ``GRPOTrainer`` trains on cascade envs through ``cascade_envs.integrations.trl``.

Each training test runs 2 steps on CPU with a tiny randomly initialised Llama that uses the embedded
SmolLM2's real tokenizer and chat template (an end-of-turn bias in TRL's ``generation_kwargs``
makes its completions end at varied lengths). The rewards TRL received and logged are checked
against our env's own scoring of the same completions, scored again by a fresh env instance.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, ClassVar

import pytest

pytest.importorskip("trl", reason="trl is not installed: pip install 'cascade-envs[trl]'")

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from transformers import AutoTokenizer, LlamaForCausalLM, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

import cascade_envs
from cascade_envs import Completion, Env, Episode, Reward, register
from cascade_envs.core import CascadeError
from cascade_envs.data import Prompt
from cascade_envs.envs.genrm.conformance import responses_of, rubric_reply
from cascade_envs.integrations.trl import REWARD_FIELD, CascadeSpec, runs
from cascade_envs.policies.embedded import embedded_model_path
from cascade_envs.policy import render_chat_prompt
from cascade_envs.rollout import RolloutRunner
from cascade_envs.testing import ScriptedJudge, ScriptedPolicy
from tests.envs.workplace.replies import final_reply
from tests.trainer import toys

G = 4  # completions per prompt (TRL's num_generations)
GROUP_ROW = {"id": "g", "prompt": "Say something."}


@pytest.fixture(scope="module")
def tok() -> Any:
    return AutoTokenizer.from_pretrained(str(embedded_model_path()), local_files_only=True)


def tiny_model(tok: Any) -> LlamaForCausalLM:
    special = (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id)
    return toys.tiny_model(len(tok), special_ids=special, max_positions=8192).train()


class Recorder:
    """Wraps the spec's reward function and keeps each call's inputs and outputs."""

    __name__ = "cascade"

    def __init__(self, fn: Any) -> None:
        self.fn, self.calls = fn, []

    def __call__(self, **kwargs: Any) -> list[float | None]:
        out = self.fn(**kwargs)
        self.calls.append((kwargs, out))
        return out


class Logs(TrainerCallback):
    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if logs and "reward" in logs:
            self.steps.append(dict(logs))


@dataclass
class Run:
    trainer: GRPOTrainer
    reward: Recorder
    logs: Logs
    batches: list[dict[str, Any]] = field(default_factory=list)
    """What TRL trained on at each step: its padded tensors and advantages."""
    rollouts: list[dict[str, Any]] = field(default_factory=list)


def train(
    spec: CascadeSpec,
    tok: Any,
    tmp_path: Any,
    *,
    max_tokens: int = 12,
    prompts: int = 2,
    extra: Any = None,
    bias: float = 7.0,
    learns: bool = True,
    group: int = G,
) -> Run:
    """Two real GRPO steps of TRL on ``spec``; every batch TRL builds is kept."""
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    config = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=group * prompts,
        num_generations=group,
        max_completion_length=max_tokens,
        max_steps=2,
        learning_rate=1e-3,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        generation_kwargs={"sequence_bias": [[[eos], bias]], **(extra or {})},
        chat_template_kwargs=spec.chat_template_kwargs,
    )
    kwargs = spec.trainer_kwargs
    recorder, logs = Recorder(spec.reward), Logs()
    run = Run(None, recorder, logs)  # type: ignore[arg-type]
    if spec.rollout:
        inner = kwargs["rollout_func"]

        def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
            out = inner(prompts, trainer)
            run.rollouts.append(out)
            return out

        kwargs["rollout_func"] = rollout_func
    kwargs.update(reward_funcs=[recorder], callbacks=[*kwargs["callbacks"], logs])
    trainer = GRPOTrainer(model=tiny_model(tok), args=config, processing_class=tok, **kwargs)
    original = trainer._generate_and_score_completions

    def spy(inputs: Any) -> Any:
        out = original(inputs)
        run.batches.append(out)
        return out

    trainer._generate_and_score_completions = spy  # type: ignore[method-assign]
    before = [p.detach().clone() for p in trainer.model.parameters()]
    run.trainer = trainer
    trainer.train()
    assert len(logs.steps) == 2 and len(run.batches) == 2
    moved = any(
        not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters(), strict=True)
    )
    assert moved or not learns, "two GRPO steps left every weight as it was"
    return run


def rescore(env: Env[Any], kwargs: dict[str, Any], ends: set[int]) -> list[Reward]:
    """Score the completions of one reward call again, group by group, with ``env`` (a fresh instance)."""
    texts = [c[0]["content"] for c in kwargs["completions"]]
    finish = ["stop" if ids and ids[-1] in ends else "length" for ids in kwargs["completion_ids"]]
    keys = list(zip(kwargs["cascade_env"], kwargs["cascade_index"], strict=True))
    out: list[Reward] = []
    for start, end in runs(keys):
        row = env.tasks[keys[start][1]].row
        responses = [Completion(t, f) for t, f in zip(texts[start:end], finish[start:end], strict=True)]
        out += asyncio.run(env.ascore_responses(row, responses))
    return out


def check_logged_rewards(run: Run, spec: CascadeSpec, fresh: Env[Any]) -> list[list[Reward]]:
    """TRL got our rewards (None for masked) and logged their masked-aware mean, step by step."""
    ours = []
    for (kwargs, returned), logged in zip(run.reward.calls, run.logs.steps, strict=True):
        assert [len(set(kwargs["cascade_index"][i : i + G])) for i in range(0, len(returned), G)] == [1] * (
            len(returned) // G
        ), "TRL's batch is not G consecutive completions per prompt"
        rewards = rescore(fresh, kwargs, spec.end_ids or set())
        assert returned == [None if r.masked else r.value for r in rewards]
        values = [r.value for r in rewards if not r.masked]
        assert logged["rewards/cascade/mean"] == pytest.approx(sum(values) / len(values), abs=1e-6)
        assert logged["cascade/masked_fraction"] == pytest.approx(
            sum(r.masked for r in rewards) / len(rewards)
        )
        ours.append(rewards)
    return ours


# ----- single-turn, per-sample ----------------------------------------------------------------------


def test_instruction_following_trains_two_steps_with_our_rewards(tok, tmp_path):
    """The task "all lowercase, no comma, start and end with ...", graded by the share followed. TRL
    samples with upper-case letters and commas suppressed, so an answer that ends in time follows
    two of the three and one cut at the length limit scores 0: each group has both."""
    env = cascade_envs.make("cascade/InstructionFollowing-v0")
    rows = [t.row for t in env.tasks if "change_case:english_lowercase" in t.row["instruction_id_list"]]
    kwargs = {"reward_mode": "fraction", "tasks": rows}
    suppressed = [i for i in range(len(tok)) if any(c.isupper() or c == "," for c in tok.decode([i]))]
    with CascadeSpec({"cascade/InstructionFollowing-v0": {"kwargs": kwargs}}) as spec:
        assert spec.rollout is False and spec.rollout_func is None
        run = train(spec, tok, tmp_path, prompts=1, extra={"suppress_tokens": suppressed})
        ours = check_logged_rewards(run, spec, cascade_envs.make("cascade/InstructionFollowing-v0", **kwargs))
    values = sorted({round(r.value, 6) for step in ours for r in step})
    assert values == [0.0, round(2 / 3, 6)], values


# ----- group-scored: GenRM and a group scorer that masks ---------------------------------------------


def test_genrm_scores_each_group_of_g_completions_together(tok, tmp_path):
    judge = ScriptedJudge(rubric_reply)
    with CascadeSpec({"cascade/GenRM-v0": {"weight": 1, "kwargs": {"judge_url": judge}}}) as spec:
        run = train(spec, tok, tmp_path, max_tokens=16)
        fresh = cascade_envs.make("cascade/GenRM-v0", judge_url=ScriptedJudge(rubric_reply))
        ours = check_logged_rewards(run, spec, fresh)
    assert judge.calls, "the judge was never asked"
    # every comparison the judge made was between two answers of one group of G, never across groups
    groups = [
        {c[0]["content"].strip() for c in kwargs["completions"][i : i + G]}
        for kwargs, _ in run.reward.calls
        for i in range(0, len(kwargs["completions"]), G)
    ]
    for call in judge.calls:
        first, second = responses_of(call.messages)
        assert any({first.strip(), second.strip()} - {"None"} <= group for group in groups)
    assert any(not r.masked and r.value != 0 for step in ours for r in step)


class MasksFirstEnv(Env[Prompt]):
    """Group-scored: the first answer the group scorer gets is masked (a failed judge call), the
    others score the length of their text mod 5 (answers cut at the length limit score 0 before)."""

    scores_groups: ClassVar[bool] = True
    thinking = False
    group_sizes: ClassVar[list[int]] = []

    async def ascore_group(
        self, task: Prompt, answers: list[str], episodes: list[Episode[Prompt]]
    ) -> list[Reward]:
        MasksFirstEnv.group_sizes.append(len(answers))
        return [Reward.failed("judge down")] + [Reward(float(len(a) % 5)) for a in answers[1:]]


register("trltest/MasksFirst-v0", MasksFirstEnv, tasks=[GROUP_ROW, {"id": "h", "prompt": "Say more."}])


def test_a_masked_reward_reaches_trl_as_none_and_stays_out_of_the_baseline(tok, tmp_path):
    with CascadeSpec("trltest/MasksFirst-v0") as spec:
        run = train(spec, tok, tmp_path, bias=10.0)
        ours = check_logged_rewards(run, spec, cascade_envs.make("trltest/MasksFirst-v0"))
    assert max(MasksFirstEnv.group_sizes) > 1
    for (_, returned), batch, rewards in zip(run.reward.calls, run.batches, ours, strict=True):
        assert any(r.masked for r in rewards) and len({r.value for r in rewards if not r.masked}) > 1
        advantages = batch["advantages"].tolist()
        for start in range(0, len(returned), G):
            group = rewards[start : start + G]
            scored = torch.tensor([r.value for r in group if not r.masked])
            mean, std = scored.mean(), scored.std() if len(scored) > 1 else torch.tensor(0.0)
            for k, reward in enumerate(group):
                if reward.masked:  # None to TRL: no signal
                    assert returned[start + k] is None and advantages[start + k] == 0.0
                else:  # normalised over the scored ones only, never over a 0 in the masked one's place
                    expected = (reward.value - mean) / (std + 1e-4)
                    assert advantages[start + k] == pytest.approx(expected.item(), abs=1e-4)


# ----- multi-turn: the workplace env through rollout_func -------------------------------------------


def workplace_rows() -> list[dict[str, Any]]:
    """A bundled two-call task, announcing only the tools its episodes call (a prompt of ~700
    tokens instead of the ~4,800 of all 27 tools, to keep the CPU test short)."""
    from cascade_envs.envs.workplace.toolset import make_toolbox

    path = resources.files("cascade_envs.envs").joinpath("workplace", "data", "tasks.jsonl")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    row = next(r for r in rows if len(r["solution"]) == 2 and "expected_answer" not in r)
    names = {c["name"] for c in row["solution"]} | {"company_directory_find_email_address"}
    return [{**row, "tools": [t for t in make_toolbox().specs() if t["function"]["name"] in names]}]


LOOKUP = (
    '<tool_call>{"name": "company_directory_find_email_address", "arguments": {"name": "Grace"}}</tool_call>'
)


class TwentyTurns:
    """A tokenising scripted policy: 19 tool calls and a final reply, 20 turns. Episodes alternate
    between solving the task (its solution's calls first) and only looking names up, so each group
    has rewards 1 and 0. Token ids as a local engine makes them: the chat template for the prompt,
    the reply's tokens plus end-of-turn for the completion."""

    def __init__(self, tok: Any, row: dict[str, Any]) -> None:
        self.tok, self.eos = tok, tok.convert_tokens_to_ids("<|im_end|>")
        self.solution = [
            f'<tool_call>{{"name": "{c["name"]}", "arguments": {c["arguments"]}}}</tool_call>'
            for c in row["solution"]
        ]
        self.final, self.started = final_reply(row), 0

    def turn(self, messages: list[dict[str, Any]]) -> Completion:
        done = [m["content"] for m in messages if m["role"] == "assistant"]
        if not done:
            self.started += 1
        solving = (self.started % 2 == 1) if not done else done[0] == self.solution[0]
        calls = (self.solution if solving else []) + [LOOKUP] * 19
        text = calls[len(done)] if len(done) < 19 else self.final
        prompt = self.tok(render_chat_prompt(self.tok, messages), add_special_tokens=False)["input_ids"]
        ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.eos]
        return Completion(text, "stop", ids, [-0.25] * len(ids), prompt)


def test_a_twenty_turn_workplace_episode_trains_on_the_transcripts_tokens(tok, tmp_path):
    rows = workplace_rows()
    env_kwargs = {"tasks": rows, "max_turns": 25}
    script = TwentyTurns(tok, rows[0])
    with CascadeSpec(
        {"cascade/Workplace-v0": {"kwargs": env_kwargs}}, policy=ScriptedPolicy(script.turn)
    ) as spec:
        assert spec.rollout
        run = train(
            spec, tok, tmp_path, prompts=1, group=2
        )  # a group of 2: one solves the task, one does not
    # the same episodes played by our runner directly: their final transcripts
    direct = TwentyTurns(tok, rows[0])

    async def play() -> Any:
        envs = {"w": cascade_envs.make("cascade/Workplace-v0", **env_kwargs)}
        async with RolloutRunner(ScriptedPolicy(direct.turn), group_size=2, envs=envs) as runner:
            return (await runner.arun([("w", rows[0])]))[0].episodes

    episodes = asyncio.run(play())
    transcripts = {
        e.reward.value: tok(tok.apply_chat_template(e.messages, tokenize=False), add_special_tokens=False)[
            "input_ids"
        ]
        for e in episodes
    }
    assert sorted(transcripts) == [0.0, 1.0] and all(e.turns == 20 for e in episodes)
    for out, batch, (kwargs, returned) in zip(run.rollouts, run.batches, run.reward.calls, strict=True):
        assert sorted(returned) == [0.0, 1.0] and [r.value for r in kwargs[REWARD_FIELD]] == returned
        assert kwargs["cascade_turns"] == [20, 20]
        for k in range(2):
            prompt, completion, mask = out["prompt_ids"][k], out["completion_ids"][k], out["env_mask"][k]
            trained = prompt + completion
            transcript = transcripts[returned[k]]
            # the training tokens are the transcript's (its last "\n" after the final end-of-turn aside)
            assert trained == transcript[: len(trained)] and tok.decode(transcript[len(trained) :]) == "\n"
            replies = next(e for e in episodes if e.reward.value == returned[k]).completions
            assert sum(mask) == sum(
                len(tok(str(r), add_special_tokens=False)["input_ids"]) + 1 for r in replies
            )
            # and TRL's tensors hold exactly them: prompt left-padded, completion with env tokens masked
            p = batch["prompt_ids"][k][batch["prompt_mask"][k].bool()].tolist()
            c = batch["completion_ids"][k][batch["completion_mask"][k].bool()].tolist()
            assert (p, c) == (prompt, completion)
            assert batch["tool_mask"][k][: len(completion)].tolist() == mask
    logged = [s["rewards/cascade/mean"] for s in run.logs.steps]
    assert logged == [0.5, 0.5]


def test_the_workplace_env_with_the_trainers_own_model(tok, tmp_path):
    """The default rollout policy: the trainer's current model (HFPolicy), token ids and logprobs kept."""
    rows = workplace_rows()
    with CascadeSpec({"cascade/Workplace-v0": {"kwargs": {"tasks": rows, "max_turns": 2}}}) as spec:
        run = train(spec, tok, tmp_path, max_tokens=6, prompts=1, learns=False)  # every reward is 0
        env = spec.envs["cascade/Workplace-v0"]
        expected_prompt = tok(
            render_chat_prompt(tok, env.prompt(env.tasks[0].task)), add_special_tokens=False
        )["input_ids"]
    for out, (_, returned) in zip(run.rollouts, run.reward.calls, strict=True):
        assert all(ids == expected_prompt for ids in out["prompt_ids"])
        assert out["logprobs"] is not None
        for ids, mask, logprobs in zip(out["completion_ids"], out["env_mask"], out["logprobs"], strict=True):
            assert len(ids) == len(mask) == len(logprobs) and sum(mask) >= 1
            assert all(lp <= 0.0 for lp, m in zip(logprobs, mask, strict=True) if m)
        # 6 tokens of a random model: cut at the length limit, the overlong rule's plain 0 (not masked)
        assert returned == [0.0] * G


# ----- the spec's own rules --------------------------------------------------------------------------


def test_a_mix_dataset_is_sampled_by_weight_and_names_its_tasks():
    with CascadeSpec({"cascade/MCQA-v0": 3, "cascade/InstructionFollowing-v0": 1}, num_rows=400) as spec:
        data = spec.train_dataset
        assert set(data.column_names) == {"prompt", "cascade_env", "cascade_index", "task_id"}
        share = sum(e == "cascade/MCQA-v0" for e in data["cascade_env"]) / len(data)
        assert 0.65 < share < 0.85
        for row in data.select(range(20)):
            env, loaded = spec.task(row["cascade_env"], row["cascade_index"])
            assert loaded.task_id == row["task_id"] and row["prompt"] == env.prompt(loaded.task)


def test_a_mix_comes_from_a_yaml_file_or_an_env_mix(tmp_path):
    path = tmp_path / "mix.yaml"
    path.write_text("envs:\n  cascade/MCQA-v0: 1\n  cascade/InstructionFollowing-v0: {weight: 1}\n")
    with CascadeSpec(path, num_rows=10) as spec:
        assert len(spec.train_dataset) == 10 and set(spec.mix.ids) == {
            "cascade/MCQA-v0",
            "cascade/InstructionFollowing-v0",
        }
    mix = cascade_envs.EnvMix({"cascade/MCQA-v0": 1.0})
    with CascadeSpec(mix) as spec:
        assert spec.envs is mix.envs and len(spec.train_dataset) == len(mix.envs["cascade/MCQA-v0"].tasks)
    assert mix.envs["cascade/MCQA-v0"].tasks is not None  # the spec left the mix's envs to their maker
    mix.envs.close()
    with pytest.raises(CascadeError, match="env_kwargs"):
        CascadeSpec(cascade_envs.EnvMix({"cascade/MCQA-v0": 1.0}), env_kwargs={"cascade/MCQA-v0": {}})


def test_rows_of_episodes_without_one_sequence(tok):
    """A template that rewrites the history trains the last turn; an episode with no token ids, nothing."""
    from cascade_envs.integrations._trl_rollout import _row
    from cascade_envs.rollout.runner import EpisodeResult
    from cascade_envs.trajectory import Trajectory, TurnRecord

    with CascadeSpec("cascade/MCQA-v0", rollout=True) as spec:
        loaded = spec.envs["cascade/MCQA-v0"].tasks[0]
        broken = Trajectory(
            [TurnRecord([1, 2], [3], [-0.1], "stop"), TurnRecord([9, 9, 9], [4, 5], [-0.2, -0.3], "stop")]
        )
        result = EpisodeResult(
            "cascade/MCQA-v0", loaded.task_id, 0, 0, [], [], Reward(1.0), trajectory=broken
        )
        row = _row(spec, result, tok)
        assert (row.prompt_ids, row.response_ids, row.loss_mask, row.logprobs) == (
            [9, 9, 9],
            [4, 5],
            [1, 1],
            [-0.2, -0.3],
        )
        failed = EpisodeResult("cascade/MCQA-v0", loaded.task_id, 0, 0, [], [], Reward.failed("policy down"))
        row = _row(spec, failed, tok)
        env = spec.envs["cascade/MCQA-v0"]
        prompt = tok(render_chat_prompt(tok, env.prompt(loaded.task), env.thinking), add_special_tokens=False)
        assert row.prompt_ids == prompt["input_ids"] and row.loss_mask == [0]


def test_the_reward_function_maps_masked_to_none_and_groups_by_runs():
    with CascadeSpec("trltest/MasksFirst-v0", tokenizer=_FakeEnds()) as spec:
        texts = ["a", "bb", "ccc", "dddd", "eeeee", "f"]
        out = spec.reward(
            prompts=[[]] * 6,
            completions=[[{"role": "assistant", "content": t}] for t in texts],
            completion_ids=[[7]] * 6,
            cascade_env=["trltest/MasksFirst-v0"] * 6,
            cascade_index=[0, 0, 0, 1, 1, 1],
        )
        assert out == [None, 2.0, 3.0, None, 0.0, 1.0]
        logged: list[tuple[str, float]] = []
        spec.reward(
            prompts=[[]] * 2,
            completions=["a", "bb"],
            completion_ids=[[7]] * 2,
            cascade_env=["trltest/MasksFirst-v0"] * 2,
            cascade_index=[0, 0],
            log_metric=lambda name, value: logged.append((name, value)),
        )
        assert logged == [("cascade/masked_fraction", 0.5)]
        with pytest.raises(CascadeError, match="cascade_env/cascade_index"):
            spec.reward(prompts=[[]], completions=["x"], completion_ids=[[7]])
        with pytest.raises(CascadeError, match="not a task"):
            spec.reward(
                prompts=[[]],
                completions=["x"],
                completion_ids=[[7]],
                cascade_env=["trltest/MasksFirst-v0"],
                cascade_index=[9],
            )
        # rollout mode: the played rewards pass through, masked as None
        passed = spec.reward(
            prompts=[[]] * 2, completions=["x", "y"], **{REWARD_FIELD: [Reward(0.5), Reward.failed("x")]}
        )
        assert passed == [0.5, None]


class _FakeEnds:
    """A tokenizer stand-in that only says which token ends a turn (id 7)."""

    eos_token_id = 7
    all_special_tokens: ClassVar[list[str]] = []


def test_multi_turn_envs_need_rollout_mode_and_rollout_needs_the_task_key():
    with pytest.raises(CascadeError, match="rollout=True"):
        CascadeSpec("cascade/Workplace-v0", rollout=False)
    with CascadeSpec("cascade/MCQA-v0", rollout=True) as spec:
        assert spec.train_dataset[0]["prompt"][0]["cascade_task"] == "cascade/MCQA-v0#0"
        with pytest.raises(CascadeError, match="cascade_task"):
            spec.rollout_func([[{"role": "user", "content": "hi"}]], None)


def test_runs_are_consecutive_equal_keys():
    assert runs(["a", "a", "b", "b", "a"]) == [(0, 2), (2, 4), (4, 5)]
    assert runs([]) == []


def test_importing_cascade_envs_imports_neither_trl_nor_datasets():
    import subprocess
    import sys

    code = "import sys, cascade_envs; cascade_envs.make('cascade/MCQA-v0'); print(sorted({'trl', 'datasets'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
