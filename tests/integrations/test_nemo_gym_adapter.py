"""``nemo-gym/Resources-v0`` against our own resources server (``serve --protocol nemo-gym``, on a
thread): playing a cascade env through NeMo Gym's protocol and back gives the rewards, masks and
observations of playing it directly, and a server that dies, errs, hangs or garbles its answers
masks the sample with its reason, while a fault only this episode's output causes scores 0.
No nemo-gym package needed (tests/integrations/test_nemo_gym_real_resources.py runs NeMo Gym's own servers).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import cascade_envs
from cascade_envs import CascadeError
from cascade_envs.core import Completion
from cascade_envs.data import DataError
from cascade_envs.http_server import Request, Response
from cascade_envs.integrations.nemo_gym import env as adapter_module
from cascade_envs.integrations.nemo_gym.client import ServerFault
from cascade_envs.integrations.nemo_gym.env import NemoGymEnv
from cascade_envs.integrations.nemo_gym.export import gym_row
from cascade_envs.integrations.nemo_gym.launch import ServerProcess
from cascade_envs.integrations.nemo_gym.responses import (
    FunctionCall,
    completion_of,
    response_object,
    turn_items,
)
from cascade_envs.rollout import RolloutRunner
from cascade_envs.serving.server import BackgroundServer
from cascade_envs.testing import ScriptedPolicy, check_env
from tests.toy_envs import ExactAnswerEnv, LookupToolEnv

ROW = {"id": "q1", "prompt": "2+2?", "answer": "4"}
TOOL_ROW = {"id": "t1", "prompt": "What is the code?", "answer": "XYZ"}
OTHER_TOOL_ROW = {"id": "t2", "prompt": "What is the other code?", "answer": "ABC"}
LOOKUP = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
CALL = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'

Rule = Callable[[Request, Callable[[Request], Awaitable[Response]]], Awaitable[Response]]


def exact_row() -> dict[str, Any]:
    """ROW as ``cascade-envs export --format nemo-gym`` writes it."""
    env = ExactAnswerEnv(tasks=[ROW])
    return gym_row(env, "toy/ExactAnswer-v0", env.load(ROW))


def tool_row(row: dict[str, Any]) -> dict[str, Any]:
    """A LookupToolEnv row as NeMo Gym writes a tool task: its tools in ``responses_create_params``."""
    messages = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": row["prompt"]}]
    return {"responses_create_params": {"input": messages, "tools": [LOOKUP]}, "cascade_row": row}


def tamper(server: BackgroundServer, rule: Rule) -> None:
    """Answer the server's requests with ``rule(request, original handler)``."""
    original = server.served.handler.handle_request

    async def handle(request: Request) -> Response:
        return await rule(request, original)

    server.served.handler.handle_request = handle


def play(env: Any, row: dict[str, Any], script: Any) -> list[Any]:
    """The runner's episodes of ``row`` on ``env`` with the policy ``script``; ``env`` is closed after."""
    runner = RolloutRunner(ScriptedPolicy(script), envs={"env": env})
    try:
        (group,) = runner.run([("env", row)])
    finally:
        env.close()
    return group.episodes


def outcome(episode: Any) -> tuple[Any, ...]:
    """What must match between direct play and play through the protocol."""
    seen = [(m["role"], m["content"]) for m in episode.messages]
    reward = episode.reward
    return seen, reward.value, reward.masked, episode.terminated, episode.truncated, episode.turns


# ----- the shared Responses conversion ------------------------------------------------------------


def test_turn_items_read_back_as_the_turns_text():
    call = FunctionCall("c1", "lookup", {"key": "a"})
    items = turn_items(0, "think first", "Let me look.", [(call, '{"output": "A"}')])
    items += turn_items(1, "", "It is A.", [])
    assert [i["type"] for i in items] == [
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    everything, calls = completion_of(response_object(items[:3]))
    assert (
        everything
        == '<think>think first</think>Let me look.\n<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}\n</tool_call>'
    )
    assert calls == [call]
    final, _ = completion_of(response_object(items, incomplete=True), after_last_tool_output=True)
    assert (str(final), final.finish_reason) == ("It is A.", "length")


# ----- round trip: our env through the protocol and back equals our env ----------------------------


@pytest.fixture
def exact():
    with BackgroundServer("nemo-gym", ExactAnswerEnv(tasks=[ROW])) as server:
        yield server


@pytest.fixture
def lookup():
    with BackgroundServer("nemo-gym", LookupToolEnv(tasks=[TOOL_ROW, OTHER_TOOL_ROW])) as server:
        yield server


ANSWERS = [
    "4",
    "5",
    "<think>2 and 2</think>4",
    "<think>2 and 2</think>5",
    "",
    "<think>never closed 4",
    Completion("4", finish_reason="length"),
    "\u200b",
]


@pytest.mark.parametrize("answer", ANSWERS, ids=repr)
def test_a_single_turn_env_plays_the_same_through_the_protocol(exact, answer):
    direct = play(ExactAnswerEnv(tasks=[ROW]), ROW, [answer])
    adapter = NemoGymEnv(url=exact.url)
    through = play(adapter, exact_row(), [answer])
    assert outcome(through[0]) == outcome(direct[0])
    assert len(exact.store) == 0  # every session closed, verified or not


SCRIPTS = {
    "call then answer": [CALL, "it is XYZ"],
    "answer at once": ["XYZ"],
    "call then wrong": [CALL, "no idea"],
    "turn limit": [CALL, CALL, CALL],
    "thinks, then calls": [f"<think>look it up</think>{CALL}", "<think>got it</think>XYZ"],
}


@pytest.mark.parametrize("script", SCRIPTS.values(), ids=SCRIPTS.keys())
def test_a_tool_env_plays_the_same_through_the_protocol(lookup, script):
    direct = play(LookupToolEnv(tasks=[TOOL_ROW]), TOOL_ROW, script)
    adapter = NemoGymEnv(url=lookup.url, max_turns=LookupToolEnv.max_turns)
    through = play(adapter, tool_row(TOOL_ROW), script)
    assert outcome(through[0]) == outcome(direct[0])
    assert len(lookup.store) == 0


def test_reset_observes_what_the_env_does(lookup):
    env = LookupToolEnv(tasks=[TOOL_ROW])
    with NemoGymEnv(url=lookup.url) as adapter:
        observed = adapter.reset(options={"task": tool_row(TOOL_ROW)})[0]
    assert observed == env.reset(options={"task": TOOL_ROW})[0]


def test_the_adapter_keeps_the_env_contract(exact):
    bad_rows = [
        ({"prompt": "no responses_create_params"}, "responses_create_params"),
        ({"responses_create_params": {"input": []}}, "responses_create_params.input"),
        ({"responses_create_params": {"input": "q", "tools": {"a": 1}}}, "responses_create_params.tools"),
        ({"responses_create_params": {"input": "q", "tools": [{**LOOKUP, "name": "verify"}]}}, None),
        ({"responses_create_params": {"input": "q", "tools": [{"type": "web_search"}]}}, None),
    ]
    with NemoGymEnv(tasks=[exact_row()], url=exact.url) as adapter:
        check_env(
            adapter, exact_row(), "4", bad_answer="5", bad_rows=bad_rows, other_kwargs={"url": exact.url}
        )


def test_concurrent_episodes_keep_their_own_sessions(lookup):
    def policy(messages):
        last = messages[-1]
        return f"it is {last['content']}" if last["role"] == "tool" else CALL

    with NemoGymEnv(url=lookup.url) as adapter:
        runner = RolloutRunner(ScriptedPolicy(policy), group_size=4, envs={"env": adapter})
        groups = runner.run([("env", tool_row(TOOL_ROW)), ("env", tool_row(OTHER_TOOL_ROW))])
    for group, answer in zip(groups, ("XYZ", "ABC"), strict=True):
        assert [e.reward.value for e in group.episodes] == [1.0] * 4
        assert all(e.messages[-1]["content"] == f"it is {answer}" for e in group.episodes)


def test_verify_metrics_surface_in_info(exact):
    async def with_metrics(request: Request, original: Any) -> Response:
        answer = await original(request)
        if request.path == "/verify":
            extra = {"accuracy": 0.75, "passed": True, "note": "text", "failure_reason": "slow judge"}
            components = {"format": 1.0, "label": "x"}
            answer.body = {**answer.body, **extra, "reward_components": components}
        return answer

    tamper(exact, with_metrics)
    with NemoGymEnv(url=exact.url) as adapter:
        adapter.reset(options={"task": {**exact_row(), "difficulty": 3}})
        _, value, _, _, info = adapter.step("4")
        reward = info["reward"]
        # the verifier's numbers, not the request's (difficulty) nor the protocol's (reward, mask_sample)
        assert (value, reward.components) == (1.0, {"accuracy": 0.75, "passed": 1.0, "format": 1.0})
        assert reward.reason == "failure: slow judge" and not reward.masked


def test_a_cut_reply_runs_no_tool_and_scores_the_overlong_zero(lookup):
    paths: list[str] = []

    async def record(request: Request, original: Any) -> Response:
        paths.append(request.path)
        return await original(request)

    tamper(lookup, record)
    (episode,) = play(
        NemoGymEnv(url=lookup.url), tool_row(TOOL_ROW), [Completion(CALL, finish_reason="length")]
    )
    assert (episode.truncated, episode.reward.value, episode.reward.masked) == (True, 0.0, False)
    assert "overlong" in episode.reward.reason or "cut" in episode.reward.reason
    assert (
        paths == ["/seed_session", "/verify"] and len(lookup.store) == 0
    )  # the verify only frees the session


def test_tool_errors_are_text_and_unknown_tools_send_nothing(lookup):
    paths: list[str] = []

    async def failing_tool(request: Request, original: Any) -> Response:
        paths.append(request.path)
        if request.path == "/lookup":
            return Response(500, {"error": "database down"})
        return await original(request)

    tamper(lookup, failing_tool)
    with NemoGymEnv(url=lookup.url) as adapter:
        adapter.reset(options={"task": tool_row(TOOL_ROW)})
        observation, *_ = adapter.step(CALL)
        assert observation[0]["content"] == 'Error: HTTP 500: {"error": "database down"}'
        observation, _, done, _, info = adapter.step(
            '<tool_call>{"name": "drop_tables", "arguments": {}}</tool_call>'
        )
        assert "unknown tool 'drop_tables'" in observation[0]["content"] and not done
        assert info["tool_errors"] == 1 and paths == ["/seed_session", "/lookup"]
        _, value, done, _, _ = adapter.step("XYZ")
        assert done and value == 1.0


def test_a_server_started_by_command_is_played_and_stopped():
    from cascade_envs.envs.mcqa.env import MCQAEnv

    mcqa = MCQAEnv()
    loaded = mcqa.tasks[0]
    row = gym_row(mcqa, "cascade/MCQA-v0", loaded)
    command = [sys.executable, "-m", "cascade_envs", "serve", "--protocol", "nemo-gym", "cascade/MCQA-v0"]
    with cascade_envs.make(
        "nemo-gym/Resources-v0", tasks=[row], command=[*command, "--port", "{port}"]
    ) as adapter:
        process = adapter.process
        assert process is not None and process.running
        adapter.reset(seed=0)
        right = adapter.step(f"\\boxed{{{loaded.row['expected_answer']}}}")[1]
        adapter.reset(seed=0)
        wrong = adapter.step("\\boxed{Z}")[1]
    assert (right, wrong) == (1.0, 0.0) and not process.running and not process.log.exists()


def test_bad_settings_and_a_server_that_will_not_start():
    with pytest.raises(CascadeError, match="needs one of url="):
        NemoGymEnv()
    with pytest.raises(CascadeError, match="needs one of url="):
        NemoGymEnv(url="http://127.0.0.1:1", server="mcqa")
    with pytest.raises(CascadeError, match=r"exited with status 3 before it answered(.|\n)*going down"):
        NemoGymEnv(command=[sys.executable, "-c", "print('going down'); raise SystemExit(3)"])
    with pytest.raises(CascadeError, match="lower-case letters"):
        NemoGymEnv(server="../etc", python=sys.executable)
    with pytest.raises(DataError, match="field 'responses_create_params'"):
        NemoGymEnv(tasks=[{"prompt": "a cascade row, not a NeMo Gym one"}], url="http://127.0.0.1:1")


def test_a_bad_setting_found_after_the_start_stops_the_server(monkeypatch):
    started: list[ServerProcess] = []

    class Recorded(ServerProcess):
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(adapter_module, "ServerProcess", Recorded)
    with pytest.raises(ValueError, match="timeout_s"):
        NemoGymEnv(
            command=[sys.executable, "-m", "http.server", "{port}", "--bind", "127.0.0.1"], timeout_s=0
        )
    assert len(started) == 1 and not started[0].running


# ----- faults: the server's are masked with their reason, the episode's score 0 ---------------------


def step_reward(adapter: NemoGymEnv, row: dict[str, Any], *turns: str) -> Any:
    adapter.reset(options={"task": row})
    for turn in turns:
        info = adapter.step(turn)[4]
    return info["reward"]


def fault(reward: Any) -> tuple[Any, ...]:
    return reward.value, reward.masked, reward.components.get("nemo_gym_fault")


SERVE_LOOKUP = f"""
import asyncio, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from cascade_envs.serving.server import start
from tests.toy_envs import LookupToolEnv

async def main():
    served = await start("nemo-gym", LookupToolEnv(), port=int(sys.argv[1]))
    await served.server.serve_forever()

asyncio.run(main())
"""


def test_a_server_that_dies_mid_episode_masks_with_its_reason():
    with NemoGymEnv(command=[sys.executable, "-c", SERVE_LOOKUP, "{port}"]) as adapter:
        assert adapter.process is not None
        adapter.reset(options={"task": tool_row(TOOL_ROW)})
        assert adapter.step(CALL)[0][0]["content"] == "XYZ"
        adapter.process.stop()  # the server process is gone, with its sessions
        _, _, done, _, info = adapter.step(CALL)
        reward = info["reward"]
        assert done and fault(reward) == (0.0, True, "server")
        assert "'lookup' got no answer" in reward.error and "control answer failed too" in reward.error


def test_a_dead_server_masks_the_episodes_the_runner_plays(exact):
    exact.close()
    (episode,) = play(NemoGymEnv(url=exact.url), exact_row(), ["4"])
    assert episode.reward.masked and "/seed_session failed" in episode.reward.error
    with pytest.raises(ServerFault, match="/seed_session failed"):
        NemoGymEnv(url=exact.url).reset(options={"task": exact_row()})


VERIFY_FAULTS = {
    "500": lambda body: Response(500, {"error": "verifier crashed"}),
    "404": lambda body: Response(404, {"detail": "Not Found"}),
    "not an object": lambda body: Response(200, "<html>oops</html>"),
    "no reward": lambda body: Response(200, {**body, "score": 1.0}),
    "a reward that is text": lambda body: Response(200, {**body, "reward": "1.0"}),
    "an infinite reward": lambda body: Response(200, {**body, "reward": 1e999}),
    "the server masks it": lambda body: Response(
        200, {**body, "reward": 0.0, "mask_sample": True, "failure_reason": "judge down"}
    ),
}


@pytest.mark.parametrize("answer", VERIFY_FAULTS.values(), ids=VERIFY_FAULTS.keys())
def test_a_verify_the_server_fails_for_everyone_masks(exact, answer):
    async def every_verify(request: Request, original: Any) -> Response:
        if request.path == "/verify":
            return answer(json.loads(request.body))
        return await original(request)

    tamper(exact, every_verify)
    with NemoGymEnv(url=exact.url) as adapter:
        reward = step_reward(adapter, exact_row(), "4")
        assert fault(reward) == (0.0, True, "server") and "control answer failed too" in reward.error


@pytest.mark.parametrize("answer", VERIFY_FAULTS.values(), ids=VERIFY_FAULTS.keys())
def test_a_verify_failure_only_this_answer_causes_scores_zero(exact, answer):
    """A model's output never turns a 0 into a mask: the server verifies the control answer."""

    async def this_answer(request: Request, original: Any) -> Response:
        if request.path == "/verify" and b"BOOM" in request.body:
            return answer(json.loads(request.body))
        return await original(request)

    tamper(exact, this_answer)
    with NemoGymEnv(url=exact.url) as adapter:
        reward = step_reward(adapter, exact_row(), "BOOM")
        assert fault(reward) == (0.0, False, "episode") and "fault is this episode's" in reward.reason
        assert step_reward(adapter, exact_row(), "4").value == 1.0


class Hang:
    """A rule that holds the requests ``hangs(request)`` picks for ``seconds``; ``settle`` waits them out
    (so that no request is still open on the server when the test closes it)."""

    def __init__(self, hangs: Callable[[Request], bool], seconds: float = 1.0):
        self.hangs, self.seconds, self.holding = hangs, seconds, 0

    async def __call__(self, request: Request, original: Any) -> Response:
        if self.hangs(request):
            self.holding += 1
            try:
                await asyncio.sleep(self.seconds)
            finally:
                self.holding -= 1
        return await original(request)

    def settle(self) -> None:
        deadline = time.monotonic() + 10
        while self.holding and time.monotonic() < deadline:
            time.sleep(0.05)


def test_a_hung_server_masks_within_the_deadline(exact):
    hang = Hang(lambda request: request.path == "/verify")
    tamper(exact, hang)
    with NemoGymEnv(url=exact.url, timeout_s=0.3) as adapter:
        started = time.monotonic()
        try:
            reward = step_reward(adapter, exact_row(), "4")
        finally:
            elapsed = time.monotonic() - started
            hang.settle()
    assert fault(reward) == (0.0, True, "server") and "deadline of 0.3 s" in reward.error
    assert elapsed < 0.95  # the verify and the control's, each bounded by the deadline


def test_a_tool_call_only_this_episode_hangs_scores_zero(lookup):
    hang = Hang(lambda request: request.path == "/lookup" and b"slow" in request.body)
    tamper(lookup, hang)
    with NemoGymEnv(url=lookup.url, timeout_s=0.3) as adapter:
        slow = '<tool_call>{"name": "lookup", "arguments": {"slow": true}}</tool_call>'
        try:
            reward = step_reward(adapter, tool_row(TOOL_ROW), slow)
        finally:
            hang.settle()
    assert fault(reward) == (0.0, False, "episode") and "'lookup' got no answer" in reward.reason


def test_a_seed_the_server_fails_masks_and_never_plays(exact):
    async def no_seed(request: Request, original: Any) -> Response:
        if request.path == "/seed_session":
            return Response(500, {"error": "out of sandboxes"})
        return await original(request)

    tamper(exact, no_seed)
    policy = ScriptedPolicy("4")
    with NemoGymEnv(url=exact.url) as adapter:
        (group,) = RolloutRunner(policy, envs={"env": adapter}).run([("env", exact_row())])
    reward = group.episodes[0].reward
    assert reward.masked and "out of sandboxes" in reward.error and policy.calls == []
