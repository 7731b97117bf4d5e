"""JudgedEnv and make_judge: how judge_url resolves, ajudge's errors, rewards end to end, and the CLI."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cascade_envs import Prompt, Reward, TaskError, register
from cascade_envs.cli import main
from cascade_envs.env import run_sync
from cascade_envs.judges import (
    JUDGE_MODEL_ENV,
    JUDGE_URL_ENV,
    HTTPJudge,
    Judge,
    JudgedEnv,
    JudgeError,
    JudgeUnavailable,
    make_judge,
)
from cascade_envs.registry import Spec, UnknownIdError, envs, judges, sync_gymnasium
from cascade_envs.testing import JudgeCall, ScriptedJudge
from tests.chat_server import ScriptedChatServer, Step

VERDICT = re.compile(r"VERDICT:\s*(yes|no)\b", re.IGNORECASE)


def parse_verdict(reply: str) -> bool:
    match = VERDICT.search(reply)
    if match is None:
        raise ValueError("no 'VERDICT: yes|no' line")
    return match.group(1).lower() == "yes"


@dataclass(frozen=True)
class VerdictTask:
    prompt: Prompt
    reference: str


class VerdictEnv(JudgedEnv[VerdictTask]):
    """Reward 1 when the judge says the answer matches the task's reference (a small judged env)."""

    judge_max_tokens = 32

    def load_task(self, row: dict[str, Any]) -> VerdictTask:
        prompt = Prompt.of(row)
        if not isinstance(row.get("reference"), str):
            raise TaskError("expected a string", "reference")
        return VerdictTask(prompt, row["reference"])

    async def ascore(self, task: VerdictTask, answer: str) -> Reward:
        ask = [
            {
                "role": "user",
                "content": f"Reference: {task.reference}\nResponse: {answer}\n"
                "Does the response match the reference? End with 'VERDICT: yes' or 'VERDICT: no'.",
            }
        ]
        try:
            matches = await self.ajudge(ask, parse_verdict)
        except JudgeError as exc:
            return Reward.failed(str(exc))
        return Reward(1.0) if matches else Reward.zero("the judge found no match")


TASK = {"id": "t1", "prompt": "What is 2 + 2?", "reference": "4"}


class RegisteredJudge(ScriptedJudge):
    """A scripted judge made by name, as a plugin's entry point is: it keeps the options it was made with."""

    def __init__(self, script: str, **options: Any):
        super().__init__(script)
        self.options = options


@pytest.fixture(autouse=True)
def _no_judge_variables(monkeypatch):
    monkeypatch.delenv(JUDGE_URL_ENV, raising=False)
    monkeypatch.delenv(JUDGE_MODEL_ENV, raising=False)


@pytest.fixture
def registered_judge() -> Iterator[str]:
    name = "test/recording-judge"
    judges.ensure_loaded()
    # as a plugin's hook registers it: by "module:Attr", imported when first made
    judges.register(
        name, Spec(name, f"{__name__}:RegisteredJudge", {"script": "VERDICT: no"}, plugin="<test>")
    )
    try:
        yield name
    finally:
        judges.unregister(name)


def score(env: VerdictEnv, answer: str) -> Reward:
    async def main() -> Reward:
        try:
            return await env.areward(TASK, answer)
        finally:
            await env.aclose()

    return run_sync(main())


# ----- rewards through a real chat-completions server ----------------------------------------


@pytest.mark.parametrize(
    ("reply", "value", "masked"),
    [
        ("The response says 4, as does the reference.\nVERDICT: yes", 1.0, False),
        ("The response says 5; the reference says 4.\nVERDICT: no", 0.0, False),
    ],
)
def test_judge_verdicts_become_rewards(reply, value, masked):
    with ScriptedChatServer([Step(reply)]) as server:
        reward = score(VerdictEnv(judge_url=server.url, judge_model="judge"), "4")
    assert (reward.value, reward.masked) == (value, masked)
    request = server.requests[0]
    assert "Response: 4" in request["messages"][0]["content"]
    assert (request["max_tokens"], request["temperature"]) == (32, 0.0)  # the class's judge settings


def test_an_unparseable_reply_is_masked_quoting_the_reply():
    with ScriptedChatServer([Step("I think it is probably fine " * 20)]) as server:
        reward = score(VerdictEnv(judge_url=server.url, judge_model="judge"), "4")
    assert reward.masked and reward.value == 0.0
    assert reward.error is not None
    assert "unparseable judge reply (no 'VERDICT: yes|no' line): 'I think it is probably fine" in reward.error
    assert "(560 chars)" in reward.error


def test_a_judge_that_stays_down_is_masked_not_zero():
    with ScriptedChatServer(default=Step(status=503)) as server:
        env = VerdictEnv(judge_url=server.url, judge_model="judge", judge_timeout_s=2.0)
        env.judge.backoff_s = 0.01  # type: ignore[attr-defined]  # keep the retries quick
        reward = score(env, "4")
    assert reward.masked and "HTTP 503" in (reward.error or "")
    assert len(server.requests) == 4  # the first attempt and 3 retries


def test_group_scoring_spreads_over_the_judge_urls():
    servers = [ScriptedChatServer(default=Step("VERDICT: yes", delay_s=0.1)).__enter__() for _ in range(2)]
    try:
        env = VerdictEnv(judge_url=[s.url for s in servers], judge_model="judge", judge_concurrency=2)

        async def group() -> list[Reward]:
            try:
                return await env.ascore_responses(TASK, ["4"] * 8)
            finally:
                await env.aclose()

        rewards = run_sync(group())
    finally:
        for server in servers:
            server.__exit__()
    assert [r.value for r in rewards] == [1.0] * 8
    assert [s.max_in_flight for s in servers] == [2, 2]
    assert [len(s.requests) for s in servers] == [4, 4]


# ----- ajudge ----------------------------------------------------------------------------------


def test_ajudge_passes_sampling_and_parses():
    judge = ScriptedJudge("VERDICT: yes")
    env = VerdictEnv(judge_url=judge)
    assert env.judge is judge
    ask = [{"role": "user", "content": "?"}]
    assert run_sync(env.ajudge(ask, parse_verdict)) is True
    assert run_sync(env.ajudge(ask, str.upper, max_tokens=7, top_p=0.5)) == "VERDICT: YES"
    assert judge.calls == [JudgeCall(ask, 32, 0.0, 1.0), JudgeCall(ask, 7, 0.0, 0.5)]


def test_judge_max_tokens_is_a_constructor_setting():
    """A judge server with a small context rejects the env's default budget: the user lowers it."""
    judge = ScriptedJudge("VERDICT: yes")
    env = VerdictEnv(judge_url=judge, judge_max_tokens=9)
    assert run_sync(env.ajudge([{"role": "user", "content": "?"}], parse_verdict)) is True
    assert judge.calls[0].max_tokens == 9
    assert VerdictEnv(judge_url=ScriptedJudge("x")).judge_max_tokens == 32  # the class default stays
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="judge_max_tokens"):
            VerdictEnv(judge_url=judge, judge_max_tokens=bad)


def test_ajudge_turns_failures_into_judge_errors():
    ask = [{"role": "user", "content": "?"}]
    env = VerdictEnv(judge_url=ScriptedJudge("no verdict here"))
    with pytest.raises(JudgeError, match=r"unparseable judge reply \(no 'VERDICT.*'no verdict here'$"):
        run_sync(env.ajudge(ask, parse_verdict))
    env = VerdictEnv(judge_url=ScriptedJudge(RuntimeError("GPU fell off")))
    with pytest.raises(JudgeError, match="raised RuntimeError: GPU fell off"):
        run_sync(env.ajudge(ask, parse_verdict))
    original = JudgeError("judge call failed: HTTP 500")
    env = VerdictEnv(judge_url=ScriptedJudge(original))
    with pytest.raises(JudgeError) as info:
        run_sync(env.ajudge(ask, parse_verdict))
    assert info.value is original


def test_a_parser_bug_is_not_disguised_as_a_judge_error():
    env = VerdictEnv(judge_url=ScriptedJudge("VERDICT: yes"))

    def broken(reply: str) -> bool:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run_sync(env.ajudge([{"role": "user", "content": "?"}], broken))


def test_aclose_closes_the_judge():
    judge = ScriptedJudge("VERDICT: yes")
    env = VerdictEnv(judge_url=judge)
    env.close()
    assert judge.closed


# ----- make_judge --------------------------------------------------------------------------------


def test_urls_make_an_http_judge_without_touching_the_network():
    judge = make_judge(
        "http://127.0.0.1:1/v1", model="m", concurrency=5, timeout_s=9.0
    )  # nothing listens on :1
    assert isinstance(judge, HTTPJudge) and isinstance(judge, Judge)
    assert (judge.urls, judge.model, judge.concurrency, judge.timeout_s) == (
        ["http://127.0.0.1:1/v1"],
        "m",
        5,
        9.0,
    )

    def urls(source: str | list[str]) -> list[str]:
        judge = make_judge(source)
        assert isinstance(judge, HTTPJudge)
        return judge.urls

    assert urls("http://a/v1, https://b/v1/") == ["http://a/v1", "https://b/v1"]
    assert urls(["http://a/v1", "http://b/v1"]) == ["http://a/v1", "http://b/v1"]
    assert urls("http://a/v1,") == ["http://a/v1"]
    with pytest.raises(ValueError, match="'ftp://a' is not an http"):
        make_judge(["http://a/v1", "ftp://a"])


def test_a_registered_judge_by_name(registered_judge):
    judge = make_judge(registered_judge, model="judge-7b", concurrency=3, timeout_s=30.0)
    assert isinstance(judge, RegisteredJudge)
    assert judge.script == "VERDICT: no"  # the registration's default
    assert judge.options == {"model": "judge-7b", "concurrency": 3, "timeout_s": 30.0}
    env = VerdictEnv(judge_url=registered_judge)
    assert score(env, "4").reason == "the judge found no match"
    assert env.judge.closed  # type: ignore[attr-defined]


def test_an_unknown_judge_name_suggests_the_close_ones(registered_judge):
    with pytest.raises(
        UnknownIdError, match="unknown judge 'test/recording-judg'; did you mean 'test/recording-judge'"
    ):
        make_judge("test/recording-judg")


def test_a_registered_judge_must_make_a_judge():
    judges.ensure_loaded()
    judges.register("test/not-a-judge", Spec("test/not-a-judge", dict, plugin="<test>"))
    try:
        with pytest.raises(TypeError, match="made a dict, which has no acomplete/aclose"):
            make_judge("test/not-a-judge")
    finally:
        judges.unregister("test/not-a-judge")


def test_no_judge_is_one_line_naming_the_fix():
    with pytest.raises(JudgeUnavailable) as info:
        VerdictEnv(tasks=[TASK])
    with pytest.raises(JudgeUnavailable):
        VerdictEnv(tasks=[TASK], judge_url=" ")  # e.g. an unset variable in a config file
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("VerdictEnv needs an LLM judge: start one with `cascade-envs serve-judge`")
    assert f"judge_url='http://127.0.0.1:8011/v1' or set {JUDGE_URL_ENV}" in message


def test_the_environment_variables_supply_url_and_model(monkeypatch):
    monkeypatch.setenv(JUDGE_URL_ENV, "http://judge-a/v1,http://judge-b/v1")
    monkeypatch.setenv(JUDGE_MODEL_ENV, "qwen-judge")
    env = VerdictEnv()
    assert isinstance(env.judge, HTTPJudge)
    assert (env.judge.urls, env.judge.model) == (["http://judge-a/v1", "http://judge-b/v1"], "qwen-judge")
    assert VerdictEnv(judge_model="other").judge.model == "other"  # type: ignore[attr-defined]


# ----- the CLI -----------------------------------------------------------------------------------


@pytest.fixture
def verdict_env_id() -> Iterator[str]:
    env_id = "judgetest/Verdict-v0"
    register(env_id, VerdictEnv)
    try:
        yield env_id
    finally:
        envs.unregister(env_id)
        sync_gymnasium()


def _tasks(tmp_path) -> str:
    path = tmp_path / "tasks.jsonl"
    rows = [{"id": f"t{i}", "prompt": f"Say {i}. ANSWER: {i}", "reference": str(i)} for i in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize(
    "command",
    [
        ["eval", "--env", "{env}", "-o", "{tmp}/out.jsonl"],
        ["filter", "--env", "{env}", "-o", "{tmp}/filtered"],
        ["solve", "--env", "{env}", "--strategy", "best_of_n", "-o", "{tmp}/solved.jsonl"],
    ],
    ids=lambda command: command[0],
)
def test_a_command_without_a_judge_says_how_to_start_one(
    command, verdict_env_id, chat_server, tmp_path, capsys
):
    argv = [part.format(env=verdict_env_id, tmp=tmp_path) for part in command]
    code = main(
        [
            *argv,
            "--tasks",
            _tasks(tmp_path),
            "--policy",
            chat_server.url,
            "--model",
            "echo-answer",
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(
        "cascade-envs: error: VerdictEnv needs an LLM judge: start one with `cascade-envs serve-judge`"
    )
    assert err.rstrip().endswith("then add --judge-url http://127.0.0.1:8011/v1")


def test_eval_with_a_judge_url(verdict_env_id, chat_server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(JUDGE_MODEL_ENV, "judge")
    with ScriptedChatServer([Step("VERDICT: yes"), Step("VERDICT: no"), Step("no idea")]) as judge:
        code = main(
            [
                "eval",
                "--env",
                verdict_env_id,
                "--tasks",
                _tasks(tmp_path),
                "--policy",
                chat_server.url,
                "--model",
                "echo-answer",
                "--no-progress",
                "-o",
                str(tmp_path / "out.jsonl"),
                "--judge-url",
                judge.url,
            ]
        )
    assert code == 0, capsys.readouterr()
    assert len(judge.requests) == 3
    assert sorted(r["messages"][0]["content"].split("Response: ")[1][0] for r in judge.requests) == [
        "0",
        "1",
        "2",
    ]
    rewards = [json.loads(line)["reward_info"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted((r["value"], r["masked"]) for r in rewards) == [(0.0, False), (0.0, True), (1.0, False)]


def test_concurrent_ajudge_calls_share_one_judge():
    with ScriptedChatServer(default=Step("VERDICT: yes", delay_s=0.05)) as server:
        env = VerdictEnv(judge_url=server.url, judge_model="judge", judge_concurrency=4)

        async def many() -> list[bool]:
            try:
                return await asyncio.gather(
                    *(env.ajudge([{"role": "user", "content": str(i)}], parse_verdict) for i in range(16))
                )
            finally:
                await env.aclose()

        assert run_sync(many()) == [True] * 16
    assert server.max_in_flight == 4
