"""``cascade/SWE-v0`` end to end: scripted policies through the rollout runner, in bwrap workspaces and
docker containers (per-instance images).

Needs the OpenHands SDK (Python >= 3.12): ``.ci/swe.sh`` runs these in ``.venv-swe``; elsewhere they skip.
"""

from __future__ import annotations

import asyncio
import glob
import importlib.util
import json
import os
import tempfile
import time
from typing import Any

import pytest

from cascade_envs.core import Completion
from cascade_envs.data import resolve_path
from cascade_envs.envs.swe.env import SweEnv
from cascade_envs.policy import ContextOverflowError
from cascade_envs.rollout import RolloutRunner
from cascade_envs.sandbox import SandboxError
from tests import docker_support
from tests.sandbox.conftest import backend_or_skip, host_pids_of, unique_marker

from .conftest import LIMITS, bundled_rows, call, fix_calls, row, swe_sandbox

if importlib.util.find_spec("openhands") is None or importlib.util.find_spec("openhands.tools") is None:
    pytest.skip(
        "the OpenHands SDK is not installed (it needs Python >= 3.12): run .ci/swe.sh",
        allow_module_level=True,
    )

FINISH = call("finish", message="Done.")


class Scripted:
    """Replays fixed replies: the k-th model turn is ``turns[k]`` (the last one repeats)."""

    def __init__(self, turns: list[str], overflow_at: int | None = None):
        self.turns, self.overflow_at = turns, overflow_at

    async def agenerate(self, messages: list[Any], *, sampling: Any, thinking: bool = True) -> Completion:
        k = sum(m.get("role") == "assistant" for m in messages)
        if self.overflow_at is not None and k >= self.overflow_at:
            raise ContextOverflowError("prompt of 300000 tokens exceeds the context of 262144")
        return Completion(self.turns[min(k, len(self.turns) - 1)], finish_reason="stop")

    async def aclose(self) -> None:
        pass


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def env(request):
    """The env on bwrap workspaces, and on docker in the bundled rows' per-instance images."""
    sandbox = swe_sandbox(request.param, bundled_rows())
    made = SweEnv(sandbox=sandbox, command_timeout_s=10, max_command_timeout_s=20, test_timeout_s=60)
    yield made
    made.close()


def play(env, rows, turns, group_size=1, **runner_kwargs):
    policy = Scripted(turns, runner_kwargs.pop("overflow_at", None))
    runner = RolloutRunner(policy, group_size=group_size, envs={"swe": env}, **runner_kwargs)
    groups = asyncio.run(runner.arun([("swe", r) for r in rows]))
    return [episode for group in groups for episode in group.episodes]


def test_the_prompt_announces_the_sdk_tools(env):
    messages = env.prompt(env.load_task(row("inilite")))
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "<tools>" in messages[0]["content"] and '"name": "file_editor"' in messages[0]["content"]
    assert "/testbed" in messages[1]["content"] and "Values that contain `=`" in messages[1]["content"]
    assert env.thinking is False and env.max_turns == 200
    assert set(env.toolbox("/testbed").names) == {"terminal", "file_editor", "finish"}


@pytest.mark.parametrize("name", ["durations", "inilite"])
def test_a_policy_that_fixes_the_bug_earns_1(env, name):
    explore = call("terminal", command="ls && python3 -m unittest 2>&1 | tail -1")
    (episode,) = play(env, [row(name)], [explore, *fix_calls(name), FINISH])
    assert episode.reward.value == 1.0 and not episode.reward.masked, episode.reward
    assert episode.terminated and not episode.truncated and episode.turns == 3
    assert "[Command finished with exit code 0]" in episode.messages[3]["content"]


def test_a_policy_that_does_not_fix_it_earns_0(env):
    edit = call(
        "file_editor",
        command="str_replace",
        path="/testbed/durations/core.py",
        old_str="    if not isinstance(text, str)",
        new_str="    if text is None or not isinstance(text, str)",
    )
    (episode,) = play(env, [row("durations")], [edit, FINISH])
    assert episode.reward.value == 0.0 and not episode.reward.masked
    assert "FAIL_TO_PASS still fail" in episode.reward.reason


def test_the_turn_limit_truncates_with_0(env):
    limited = SweEnv(sandbox=env.sandbox, max_turns=3, command_timeout_s=10)
    (episode,) = play(limited, [row("inilite")], [*fix_calls("inilite"), call("terminal", command="ls")])
    assert episode.truncated and episode.turns == 3
    assert (
        episode.reward.value == 0.0
        and not episode.reward.masked
        and "turn limit of 3" in episode.reward.reason
    )


def test_context_overflow_and_token_budget_end_as_truncated(env):
    (overflow,) = play(env, [row("inilite")], [call("terminal", command="ls")], overflow_at=2)
    assert overflow.truncated and overflow.error is None and "context overflow" in overflow.reward.reason
    (budget,) = play(env, [row("inilite")], [call("terminal", command="seq 1 2000")], max_episode_tokens=3000)
    assert budget.truncated and "token budget" in budget.reward.reason and budget.reward.value == 0.0


def test_the_deadline_cuts_a_running_command_and_truncates(env):
    start, marker = time.monotonic(), unique_marker()
    sleep = call("terminal", command=f"sleep {marker}", timeout=40)
    (episode,) = play(env, [row("inilite")], [sleep], episode_timeout_s=2)
    assert episode.truncated and "episode deadline of 2 s" in episode.reward.reason
    own = SweEnv(sandbox=env.sandbox, episode_timeout_s=2, max_command_timeout_s=40)  # the env's own budget
    (episode,) = play(own, [row("inilite")], [sleep])
    assert (
        episode.truncated and "episode deadline of 2 s" in episode.reward.reason and not episode.reward.masked
    )
    assert time.monotonic() - start < 10
    if command_uid(env.sandbox) is not None:
        time.sleep(0.5)
        assert host_pids_of(command_uid(env.sandbox), "sleep", marker) == []


def test_a_workspace_that_fails_to_set_up_is_masked(env):
    broken = {**row("durations"), "setup_cmd": "python3 -c 'import nonexistent_dependency'"}
    (episode,) = play(env, [broken], [FINISH])
    assert (
        episode.reward.masked
        and "workspace setup" in episode.reward.error
        and "setup_cmd exit code 1" in episode.reward.error
    )
    with pytest.raises(SandboxError, match="workspace setup"):
        env.reset(options={"task": broken})


def test_an_empty_final_reply_earns_0_without_a_test_run(env):
    (episode,) = play(env, [row("inilite")], [*fix_calls("inilite"), ""])
    assert episode.reward.value == 0.0 and "no final answer" in episode.reward.reason


def test_bad_input_gets_clear_observations_in_bounded_time(env):
    turns = [
        '<tool_call>{"name": "terminal", "arguments": {"command": "ls"</tool_call>',
        call("run_shell", command="ls"),
        call("terminal", command=7),
        call("terminal", command="sleep 1000", timeout=1),
        call("terminal", command="yes 'flood flood flood'"),
        call("terminal", command="b() { b | b & }; b", timeout=2),
        call(
            "terminal", command="rm -rf --no-preserve-root / 2>/dev/null; ls -A /testbed | wc -l", timeout=20
        ),
        call("terminal", command="", is_input=True),
        call("file_editor", command="delete", path="/testbed/x"),
        FINISH,
    ]
    start = time.monotonic()
    (episode,) = play(env, [row("durations")], turns)
    tool = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert len(tool) == 10 and tool[9] == "Done."
    assert "invalid JSON" in tool[0]
    assert "unknown tool 'run_shell'" in tool[1]
    assert "invalid arguments for terminal" in tool[2]
    assert "timed out after 1 seconds" in tool[3]
    assert "too much output" in tool[4] and len(tool[4]) < 40_000
    assert "Command" in tool[5]  # the fork bomb ended (timeout or process limit) and was reported
    assert tool[6].startswith("0\n")  # the workspace is gone, the host is not
    assert "no command is running" in tool[7]
    assert "invalid arguments for file_editor" in tool[8]
    # everything was wiped: the tests cannot pass, but nothing failed on the env's side
    assert episode.reward.value == 0.0 and not episode.reward.masked, episode.reward
    assert time.monotonic() - start < 90


def test_calls_after_finish_do_not_run(env):
    (episode,) = play(env, [row("inilite")], [FINISH + call("terminal", command="touch /testbed/late")])
    assert "the episode finished; 1 more were not run (terminal)" in episode.messages[-1]["content"]


def test_local_is_refused_unless_named_unsafe():
    local = backend_or_skip("local", **LIMITS)
    with pytest.raises(ValueError, match=r"refuses the 'local' sandbox.*allow_unsafe_local=True"):
        SweEnv(sandbox=local)


def test_local_workspace_runs_the_same_episode_without_reach_to_the_rows(env, tmp_path):
    local = backend_or_skip("local", **LIMITS)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(row("durations")) + "\n")
    made = SweEnv(str(tasks), sandbox=local, command_timeout_s=10, allow_unsafe_local=True)
    bundled = os.path.dirname(str(resolve_path("bundled:swe/tasks.jsonl")))
    snoop = call(
        "terminal",
        command=f"cat {tasks} {bundled}/tasks.jsonl 2>&1 | grep -c parse_duration; "
        f"echo hi > /testbed-escape 2>&1; ls {tmp_path}",
    )
    try:
        (episode,) = play(
            made,
            [row("durations")],
            [call("terminal", command="pwd"), snoop, *fix_calls("durations"), FINISH],
        )
    finally:
        made.close()
    assert episode.reward.value == 1.0, episode.reward
    workdir = episode.messages[3]["content"].splitlines()[0]
    assert workdir.startswith(tempfile.gettempdir()) and workdir in episode.messages[1]["content"]
    assert episode.messages[5]["content"].startswith("0\n"), episode.messages[5][
        "content"
    ]  # the rows are hidden


def test_nothing_is_left_behind(env, private_tempdir):
    marker = unique_marker()
    if env.sandbox.name == "docker":  # this test's containers carry a label of their own
        env = SweEnv(sandbox=swe_sandbox("docker", labels={"cascade-test": marker}), command_timeout_s=10)
        volumes = docker_support.volumes()
    play(
        env,
        [row("durations"), row("inilite")],
        [call("terminal", command=f"sleep {marker}0 &"), FINISH],
        group_size=2,
    )
    time.sleep(0.2)
    assert glob.glob(os.path.join(private_tempdir, "cascade-workspace-*")) == []
    if command_uid(env.sandbox) is not None:
        assert host_pids_of(command_uid(env.sandbox), "sleep", marker) == []
    if env.sandbox.name == "docker":
        assert (
            docker_support.containers(f"cascade-test={marker}") == [] and docker_support.volumes() <= volumes
        )


def command_uid(sandbox) -> int | None:
    """The host uid an episode's commands run as (docker: the image workspace's user, root)."""
    return 0 if sandbox.name == "docker" else sandbox.run_as


def test_the_env_conforms():
    from cascade_envs.testing import conformance_case

    sandbox = backend_or_skip("bwrap", **LIMITS)
    conformance_case("cascade/SWE-v0").check(SweEnv(sandbox=sandbox, command_timeout_s=10))
