"""``cascade-envs serve --protocol openenv`` driven by OpenEnv's own clients (``openenv-core``).

OpenEnv's ``GenericEnvClient`` (async and ``.sync()``) and our typed ``CascadeEnvClient`` (an
``openenv.core.EnvClient``) play MCQA, instruction-following and multi-turn workplace episodes
against the server; each reward equals what the env gives for the same replies called directly.
Then: masked rewards arrive as None (never 0), the session cap, one session per connection freed on
close and on a dropped connection, idle expiry, bad input over the WebSocket and HTTP, the HTTP
routes, and the bearer token on the WebSocket upgrade.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from openenv.core.generic_client import GenericEnvClient
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

import cascade_envs
from cascade_envs import Env, Reward
from cascade_envs.integrations.openenv.client import CascadeAction, CascadeEnvClient, CascadeToolCall
from cascade_envs.serving.server import BackgroundServer
from tests.envs.workplace.replies import final_reply
from tests.toy_envs import BrokenVerifierEnv, ExactAnswerEnv, LongestWinsEnv

MCQA, IF, WORKPLACE = "cascade/MCQA-v0", "cascade/InstructionFollowing-v0", "cascade/Workplace-v0"


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, BackgroundServer]]:
    """One server per env id (a cap of 4 sessions) and a second instance of each env to call directly."""
    made = {env_id: BackgroundServer("openenv", env_id, max_sessions=4) for env_id in (MCQA, IF, WORKPLACE)}
    yield made
    for server in made.values():
        server.close()


@pytest.fixture(scope="module")
def direct() -> Iterator[dict[str, Env]]:
    envs = {env_id: cascade_envs.make(env_id) for env_id in (MCQA, IF, WORKPLACE)}
    yield envs
    for env in envs.values():
        env.close()


async def direct_episode(env: Env, row: dict[str, Any], replies: list[str]) -> tuple[list[Any], Reward]:
    """The env's own answers and reward for ``replies`` to ``row``, without any server."""
    episode = await env.astart(env.load(row))
    observations = [list(episode.messages)]
    for reply in replies:
        observations.append((await env.aadvance(episode, reply)).observation)
        if episode.done:
            break
    reward = (await env.ascore_episodes([episode]))[0]
    await env.aend(episode)
    return observations, reward


def same_reward(result_reward: float | None, info: dict[str, Any], reward: Reward) -> None:
    assert info == reward.to_dict()
    assert result_reward == (None if reward.masked else reward.value)


def wait_until(condition: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.05)


def test_mcqa_over_the_async_generic_client_scores_as_the_env(servers, direct):
    env = direct[MCQA]
    rows = [t.row for t in env.tasks][:4]
    cases = [(i, f"<think>Sure.</think>\\boxed{{{row['expected_answer']}}}") for i, row in enumerate(rows)]
    cases += [(0, "\\boxed{Z}"), (1, "no letter here"), (2, "")]

    async def play() -> list[tuple[Any, Any]]:
        out = []
        async with GenericEnvClient(base_url=servers[MCQA].url) as client:  # one session, many episodes
            for index, reply in cases:
                first = await client.reset(index=index)
                assert first.done is False and first.reward is None
                assert first.observation["turn"] == 0 and first.observation["messages"]
                out.append((first, await client.step({"message": reply})))
        return out

    results = asyncio.run(play())
    rewards = []
    for (index, reply), (first, last) in zip(cases, results, strict=True):
        observations, reward = asyncio.run(direct_episode(env, rows[index], [reply]))
        assert first.observation["messages"] == observations[0]
        assert first.observation["task_id"] == env.tasks[index].task_id
        assert last.done is True and last.observation["turn"] == 1
        same_reward(last.reward, last.observation["reward_info"], reward)
        rewards.append(last.reward)
    assert rewards[:4] == [1.0] * 4 and rewards[4:] == [0.0] * 3  # the test can tell right from wrong


def test_instruction_following_over_the_sync_client_scores_as_the_env(servers, direct):
    env = direct[IF]
    replies = ["Here is my answer, all in lowercase and short.", "HELLO WORLD " * 50, "<think>x</think>"]
    with GenericEnvClient(base_url=servers[IF].url).sync() as client:
        for index, reply in enumerate(replies):
            first = client.reset(index=index, episode_id=f"ep-{index}")
            last = client.step({"message": reply})
            state = client.state()
            assert state["episode_id"] == f"ep-{index}" and state["step_count"] == 1 and state["done"] is True
            observations, reward = asyncio.run(direct_episode(env, env.tasks[index].row, [reply]))
            assert first.observation["messages"] == observations[0]
            same_reward(last.reward, last.observation["reward_info"], reward)


def workplace_replies(row: dict[str, Any]) -> list[str]:
    calls = [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in row["solution"]]
    return [f"<tool_call>{json.dumps(call)}</tool_call>" for call in calls] + [final_reply(row)]


def test_workplace_multi_turn_step_by_step_over_the_typed_client(servers, direct):
    env = direct[WORKPLACE]
    picked = [i for i, t in enumerate(env.tasks) if 1 <= len(t.row["solution"]) < env.max_turns][:3]
    assert len(picked) == 3

    async def play(index: int, replies: list[str], apart: bool) -> list[Any]:
        async with CascadeEnvClient(base_url=servers[WORKPLACE].url) as client:
            results = [await client.reset(index=index)]
            for reply in replies:
                if apart and reply.startswith("<tool_call>"):  # the same call, given as a structured call
                    call = json.loads(reply.removeprefix("<tool_call>").removesuffix("</tool_call>"))
                    action = CascadeAction(tool_calls=[CascadeToolCall(**call)])
                else:
                    action = CascadeAction(message=reply)
                results.append(await client.step(action))
                if results[-1].done:
                    break
            state = await client.state()
            assert state.step_count == len(results) - 1 and state.done
            return results

    for n, index in enumerate(picked):
        row = env.tasks[index].row
        replies = workplace_replies(row)
        results = asyncio.run(play(index, replies, apart=n == 1))
        observations, reward = asyncio.run(direct_episode(env, row, replies))
        assert [r.observation.messages for r in results] == observations  # tool results, turn by turn
        assert [r.done for r in results] == [False] * len(replies) + [True]
        assert all(r.reward is None for r in results[:-1])
        same_reward(results[-1].reward, results[-1].observation.reward_info, reward)
        assert reward.value == 1.0  # the row's own solution
    # a wrong final answer (no tool calls) scores the env's legitimate 0, over the wire as well
    row = env.tasks[picked[0]].row
    results = asyncio.run(play(picked[0], ["I did nothing."], apart=False))
    _, reward = asyncio.run(direct_episode(env, row, ["I did nothing."]))
    same_reward(results[-1].reward, results[-1].observation.reward_info, reward)
    assert results[-1].reward == 0.0


def test_a_masked_reward_is_none_with_its_error_never_0():
    env = BrokenVerifierEnv(tasks=[{"prompt": "2+2?", "answer": "4"}])
    with BackgroundServer("openenv", env) as server:
        with GenericEnvClient(base_url=server.url).sync() as client:
            client.reset()
            result = client.step({"message": "4"})

        async def typed() -> Any:
            async with CascadeEnvClient(base_url=server.url) as typed_client:
                await typed_client.reset(index=0)
                return await typed_client.step(CascadeAction(message="4"))

        typed_result = asyncio.run(typed())
    assert result.done is True and result.reward is None
    info = result.observation["reward_info"]
    assert info["masked"] is True and "judge server unreachable" in info["error"]
    assert typed_result.reward is None and typed_result.observation.reward_info["masked"] is True


def test_a_group_scored_env_is_refused_naming_the_protocol_that_serves_it():
    with pytest.raises(cascade_envs.CascadeError, match="nemo-gym"):
        BackgroundServer("openenv", LongestWinsEnv(tasks=[{"prompt": "p", "answer": "a"}]))


def test_the_session_cap_one_session_per_connection_and_sessions_freed(servers):
    server = servers[MCQA]

    async def scenario() -> None:
        clients = [GenericEnvClient(base_url=server.url) for _ in range(5)]
        for client in clients[:4]:
            await client.connect()
            await client.reset(index=0)
        assert len(server.store) == 4  # one session per connection
        with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
            await clients[4].reset(index=0)
        await clients[4].close()
        await clients[0].close()  # a clean close frees its session...
        await asyncio.to_thread(wait_until, lambda: len(server.store) == 3)
        late = GenericEnvClient(base_url=server.url)
        assert (await late.reset(index=1)).done is False
        assert clients[1]._ws is not None
        clients[1]._ws.transport.abort()  # ...and so does a dropped connection
        await asyncio.to_thread(wait_until, lambda: len(server.store) == 3)
        for client in (*clients[2:4], late):
            await client.close()
        await asyncio.to_thread(wait_until, lambda: len(server.store) == 0)

    asyncio.run(scenario())


def test_a_client_that_drops_mid_episode_frees_its_session_and_episode(servers, direct):
    server, env = servers[WORKPLACE], direct[WORKPLACE]
    index = next(i for i, t in enumerate(env.tasks) if len(t.row["solution"]) >= 2)
    replies = workplace_replies(env.tasks[index].row)
    ended: list[str] = []
    served_env = server.served.env
    original = served_env.aend

    async def spy(episode: Any) -> None:
        ended.append(episode.task_id)
        await original(episode)

    served_env.aend = spy  # type: ignore[method-assign]
    try:

        async def scenario() -> None:
            client = GenericEnvClient(base_url=server.url)
            await client.reset(index=index)
            assert (await client.step({"message": replies[0]})).done is False
            assert client._ws is not None
            client._ws.transport.abort()
            await asyncio.to_thread(wait_until, lambda: len(server.store) == 0)

        asyncio.run(scenario())
    finally:
        served_env.aend = original  # type: ignore[method-assign]
    assert ended == [env.tasks[index].task_id]  # the half-played episode was released


def test_two_connections_play_interleaved_episodes_without_sharing_state(servers, direct):
    server, env = servers[WORKPLACE], direct[WORKPLACE]
    picked = [i for i, t in enumerate(env.tasks) if 2 <= len(t.row["solution"]) < env.max_turns][:2]
    scripts = [workplace_replies(env.tasks[i].row) for i in picked]

    async def scenario() -> list[Any]:
        a, b = GenericEnvClient(base_url=server.url), GenericEnvClient(base_url=server.url)
        await a.reset(index=picked[0])
        await b.reset(index=picked[1])
        done: list[Any] = [None, None]
        for step in range(max(map(len, scripts))):
            for k, client in enumerate((a, b)):
                if done[k] is None and step < len(scripts[k]):
                    result = await client.step({"message": scripts[k][step]})
                    if result.done:
                        done[k] = result
        await a.close()
        await b.close()
        return done

    finals = asyncio.run(scenario())
    for index, script, final in zip(picked, scripts, finals, strict=True):
        _, reward = asyncio.run(direct_episode(env, env.tasks[index].row, script))
        same_reward(final.reward, final.observation["reward_info"], reward)
        assert final.reward == 1.0


def test_bad_input_over_the_websocket_gets_clear_errors_and_the_session_goes_on():
    env = cascade_envs.make(MCQA)
    with BackgroundServer("openenv", env, options={"max_message_mb": 0.01}) as server:
        url = server.url.replace("http://", "ws://") + "/ws"

        async def scenario() -> None:
            async with ws_connect(url) as ws:

                async def ask(raw: str) -> dict[str, Any]:
                    await ws.send(raw)
                    return json.loads(await asyncio.wait_for(ws.recv(), 10))

                def code(answer: dict[str, Any]) -> str:
                    assert answer["type"] == "error", answer
                    return answer["data"]["code"]

                assert code(await ask("{not json")) == "INVALID_JSON"
                assert code(await ask("[1, 2]")) == "VALIDATION_ERROR"
                assert code(await ask('{"type": "teleport"}')) == "UNKNOWN_TYPE"
                assert code(await ask('{"type": "mcp", "data": {}}')) == "UNKNOWN_TYPE"
                assert code(await ask('{"type": "step", "data": {"message": "A"}}')) == "EXECUTION_ERROR"
                assert code(await ask('{"type": "reset", "data": {"colour": 1}}')) == "VALIDATION_ERROR"
                assert code(await ask('{"type": "reset", "data": {"index": 10000}}')) == "VALIDATION_ERROR"
                assert code(await ask('{"type": "reset", "data": {"seed": -1}}')) == "VALIDATION_ERROR"
                assert (
                    code(await ask('{"type": "reset", "data": {"task": {"bad": 1}}}')) == "VALIDATION_ERROR"
                )
                assert (await ask('{"type": "reset", "data": {"index": 0}}'))["type"] == "observation"
                assert code(await ask('{"type": "step", "data": {"text": "A"}}')) == "VALIDATION_ERROR"
                assert code(await ask('{"type": "step", "data": {"message": 7}}')) == "VALIDATION_ERROR"
                assert code(await ask('{"type": "step"}')) == "VALIDATION_ERROR"
                bad_call = {"type": "step", "data": {"tool_calls": [{"name": "f", "arguments": "{"}]}}
                assert code(await ask(json.dumps(bad_call))) == "VALIDATION_ERROR"
                done = await ask('{"type": "step", "data": {"message": "\\\\boxed{A}"}}')
                assert done["type"] == "observation" and done["data"]["done"] is True
                answer = await ask('{"type": "step", "data": {"message": "B"}}')  # a finished episode
                assert code(answer) == "EXECUTION_ERROR" and "ended" in answer["data"]["message"]
                state = await ask('{"type": "state"}')
                assert state == {
                    "type": "state",
                    "data": {
                        "episode_id": state["data"]["episode_id"],
                        "step_count": 1,
                        "task_id": env.tasks[0].task_id,
                        "done": True,
                        "env_id": "MCQAEnv",
                    },
                }
                await ws.send(json.dumps({"type": "step", "data": {"message": "x" * 20_000}}))  # over 10 KiB
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), 10)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
            await asyncio.to_thread(wait_until, lambda: len(server.store) == 0)

        asyncio.run(scenario())


class SlowEnv(ExactAnswerEnv):
    """Scores after 2 s: past a short request deadline."""

    async def ascore(self, task: Any, answer: str) -> Reward:
        await asyncio.sleep(2.0)
        return await super().ascore(task, answer)


def test_a_step_past_the_request_deadline_ends_the_session_with_an_error():
    env = SlowEnv(tasks=[{"prompt": "2+2?", "answer": "4"}])
    with BackgroundServer("openenv", env, request_deadline_s=0.3) as server:

        async def scenario() -> None:
            client = GenericEnvClient(base_url=server.url)
            await client.reset(index=0)
            with pytest.raises(
                RuntimeError, match=r"did not finish within 0.3 s.*connect again.*SESSION_ERROR"
            ):
                await client.step({"message": "4"})
            await asyncio.to_thread(wait_until, lambda: len(server.store) == 0)
            await client.close()
            async with GenericEnvClient(base_url=server.url) as again:  # a new connection works
                assert (await again.reset(index=0)).done is False

        asyncio.run(scenario())


def test_idle_sessions_expire_and_their_connections_close():
    env = cascade_envs.make(MCQA)
    with BackgroundServer("openenv", env, ttl_s=0.5) as server:

        async def scenario() -> None:
            async with ws_connect(server.url.replace("http://", "ws://") + "/ws") as ws:
                await ws.send('{"type": "reset", "data": {}}')
                assert json.loads(await ws.recv())["type"] == "observation"
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 10)  # closed after 0.5 s without a message
            await asyncio.to_thread(wait_until, lambda: len(server.store) == 0)

        asyncio.run(scenario())


def test_http_routes_schema_and_stateless_reset_and_step(servers, direct):
    with httpx.Client(base_url=servers[MCQA].url, timeout=30) as http:
        schema = http.get("/schema").json()
        assert set(schema) == {"action", "observation", "state"}
        assert set(schema["action"]["properties"]) == {"message", "tool_calls", "metadata"}
        assert {"messages", "reward_info", "done", "reward"} <= set(schema["observation"]["properties"])
        assert {"episode_id", "step_count"} <= set(schema["state"]["properties"])
        assert http.get("/health").json() == {"status": "healthy"}
        assert http.get("/metadata").json()["name"] == MCQA
        assert http.get("/state").json()["step_count"] == 0
        reset = http.post("/reset", json={"index": 2}).json()
        assert set(reset) == {"observation", "reward", "done"} and reset["done"] is False
        observation = {**reset["observation"], "reward": reset["reward"], "done": reset["done"]}
        jsonschema.validate(observation, schema["observation"])  # what we send fits what we advertise
        jsonschema.validate(http.get("/state").json(), schema["state"])
        jsonschema.validate(
            {"message": "hi", "tool_calls": [{"name": "f", "arguments": {}}]}, schema["action"]
        )
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"text": "hi"}, schema["action"])
        env = direct[MCQA]
        row = env.tasks[2].row
        for reply in (f"\\boxed{{{row['expected_answer']}}}", "\\boxed{Q}"):
            step = http.post("/step", json={"action": {"message": reply}, "index": 2}).json()
            jsonschema.validate(
                {**step["observation"], "reward": step["reward"], "done": True}, schema["observation"]
            )
            _, reward = asyncio.run(direct_episode(env, row, [reply]))
            same_reward(step["reward"], step["observation"]["reward_info"], reward)
        assert http.post("/step", json={"action": {"message": "A"}}).status_code == 400  # which task?
        assert http.post("/step", content=b"{oops").status_code == 400
        assert http.post("/step", json={"action": {"message": "A"}, "index": 0, "x": 1}).status_code == 400
        assert http.post("/step", json={"action": {"nope": 1}, "index": 0}).status_code == 400
        assert http.post("/reset", json={"index": -3}).status_code == 400
        assert http.get("/mcp").status_code == 404
    assert len(servers[MCQA].store) == 0  # HTTP requests keep no session
    with httpx.Client(base_url=servers[WORKPLACE].url, timeout=30) as http:
        answer = http.post("/step", json={"action": {"message": "hi"}, "index": 0})
        assert answer.status_code == 409 and "/ws" in answer.json()["error"]


def test_a_bearer_token_guards_the_websocket_upgrade():
    env = cascade_envs.make(MCQA)
    with BackgroundServer("openenv", env, token="s3cret-token") as server:
        url = server.url.replace("http://", "ws://") + "/ws"

        async def scenario() -> None:
            with pytest.raises(InvalidStatus) as refused:
                async with ws_connect(url):
                    pass
            assert refused.value.response.status_code == 401
            async with ws_connect(url, additional_headers={"Authorization": "Bearer s3cret-token"}) as ws:
                await ws.send('{"type": "reset", "data": {"index": 0}}')
                assert json.loads(await ws.recv())["type"] == "observation"

        asyncio.run(scenario())


def test_the_cli_serves_an_env_that_openenv_s_client_plays(tmp_path):
    command = [sys.executable, "-m", "cascade_envs", "serve", "--protocol", "openenv", MCQA, "--port", "0"]
    refused = subprocess.run([*command, "--host", "0.0.0.0"], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "--allow-remote" in refused.stderr + refused.stdout
    process = subprocess.Popen(
        [*command, "--max-sessions", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert url, line
        with GenericEnvClient(base_url=url.group(0)).sync() as client:
            first = client.reset(index=0)
            row_answer = first.observation["messages"][-1]["content"]
            assert first.done is False and row_answer
            last = client.step({"message": "\\boxed{Z}"})
            assert last.done is True and last.reward == 0.0
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def test_closing_the_server_closes_open_sessions_with_1001():
    server = BackgroundServer("openenv", cascade_envs.make(MCQA))

    async def scenario() -> None:
        async with ws_connect(server.url.replace("http://", "ws://") + "/ws") as ws:
            await ws.send('{"type": "reset", "data": {"index": 0}}')
            assert json.loads(await ws.recv())["type"] == "observation"
            await asyncio.to_thread(server.close)
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        assert len(server.store) == 0

    asyncio.run(scenario())


def test_many_connections_never_closed_stay_capped_and_expire():
    env = cascade_envs.make(MCQA)
    with BackgroundServer("openenv", env, max_sessions=8, ttl_s=1.0) as server:
        url = server.url.replace("http://", "ws://") + "/ws"

        async def scenario() -> None:
            sockets = [await ws_connect(url) for _ in range(60)]  # opened, never closed by the client
            try:
                await asyncio.to_thread(wait_until, lambda: len(server.store) == 8)
                refused = 0
                for ws in sockets[8:]:
                    answer = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    refused += answer["data"]["code"] == "CAPACITY_REACHED"
                assert refused == 52 and len(server.store) == 8
                for ws in sockets:  # within about the 1 s ttl, every connection is closed by the server
                    with pytest.raises(ConnectionClosed):
                        while True:
                            await asyncio.wait_for(ws.recv(), 15)
                assert len(server.store) == 0
            finally:
                for ws in sockets:
                    await ws.close()

        asyncio.run(scenario())
