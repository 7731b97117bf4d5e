"""The nemo-gym protocol over HTTP (no nemo-gym package needed): routes, rewards equal to the env's,
masked rewards, group scoring under a deadline, and bad input."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import httpx
import pytest

import cascade_envs
from cascade_envs.serving.server import BackgroundServer
from tests.toy_envs import BrokenVerifierEnv, ExactAnswerEnv, LongestWinsEnv, LookupToolEnv

ROW = {"id": "q1", "prompt": "2+2?", "answer": "4"}
COOKIE = "cascade_session"


def response(*items: dict[str, Any], incomplete: bool = False) -> dict[str, Any]:
    """A Responses API object with ``items`` as its output."""
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0.0,
        "model": "m",
        "output": list(items),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
    }


def message(text: str, **extra: Any) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": content,
        **extra,
    }


def call(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": json.dumps(arguments), "call_id": call_id}


def params(row: dict[str, Any]) -> dict[str, Any]:
    return {"input": [{"role": "user", "content": row["prompt"]}]}


def gym_row(row: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"responses_create_params": params(row), "cascade_row": row, **extra}


def rollout(client: httpx.Client, row: dict[str, Any], text: str, **extra: Any) -> dict[str, Any]:
    """/seed_session then /verify, as NeMo Gym's simple agent does; the verify answer."""
    client.cookies.clear()
    seeded = client.post("/seed_session", json=gym_row(row, **extra))
    assert seeded.status_code == 200, seeded.text
    verified = client.post("/verify", json={**gym_row(row, **extra), "response": response(message(text))})
    assert verified.status_code == 200, verified.text
    return verified.json()


@pytest.fixture(scope="module")
def exact():
    with BackgroundServer("nemo-gym", ExactAnswerEnv(tasks=[ROW])) as server:
        yield server


def test_single_turn_rewards_equal_the_envs(exact):
    env = ExactAnswerEnv(tasks=[ROW])
    with httpx.Client(base_url=exact.url, timeout=30) as client:
        for text in ("4", "5", "<think>hmm</think>4", ""):
            got = rollout(client, ROW, text)
            want = asyncio.run(env.areward(ROW, text))
            assert (got["reward"], got["mask_sample"], got["reward_reason"]) == (
                want.value,
                False,
                want.reason,
            )
            assert got["cascade_row"] == ROW and "responses_create_params" in got  # the request, echoed
    assert len(exact.store) == 0  # every verify closed its session


def test_reasoning_items_and_token_ids_reach_the_env():
    seen = []

    class Recording(ExactAnswerEnv):
        async def ascore_episode(self, episode, answer):
            seen.append(
                (answer, episode.final.token_ids, episode.final.logprobs, episode.final.finish_reason)
            )
            return await super().ascore_episode(episode, answer)

    with (
        BackgroundServer("nemo-gym", Recording(tasks=[ROW])) as server,
        httpx.Client(base_url=server.url) as c,
    ):
        c.post("/seed_session", json=gym_row(ROW))
        reasoning = {"id": "r", "type": "reasoning", "summary": [{"type": "summary_text", "text": "2 and 2"}]}
        tokens = {
            "prompt_token_ids": [1, 2],
            "generation_token_ids": [7, 8],
            "generation_log_probs": [-0.1, -0.2],
        }
        out = c.post(
            "/verify", json={**gym_row(ROW), "response": response(reasoning, message("4", **tokens))}
        )
        assert out.json()["reward"] == 1.0
    assert seen == [("4", [7, 8], [-0.1, -0.2], "stop")]  # the reasoning split off, the tokens kept


def test_masked_reward_is_flagged_never_a_plain_zero():
    with (
        BackgroundServer("nemo-gym", BrokenVerifierEnv(tasks=[ROW])) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        got = rollout(client, ROW, "4")
    assert got["mask_sample"] is True and got["reward"] == 0.0
    assert "judge server unreachable" in got["reward_masked_reason"] == got["failure_reason"]


TOOL_ROW = {"id": "t1", "prompt": "What is the code?", "answer": "XYZ"}


def test_gymnasium_reset_step_with_text_and_function_call_tools():
    env = LookupToolEnv(tasks=[TOOL_ROW])
    with BackgroundServer("nemo-gym", env) as server, httpx.Client(base_url=server.url, timeout=30) as c:
        reset = c.post("/reset", json=gym_row(TOOL_ROW))
        assert reset.status_code == 200 and reset.json()["observation"] is None
        # a native function call: its output comes back under info.tool_outputs, by call_id
        step = c.post(
            "/step", json={**gym_row(TOOL_ROW), "response": response(call("lookup", {}, "c9"))}
        ).json()
        assert step["terminated"] is False and step["info"]["tool_outputs"] == [
            {"call_id": "c9", "output": "XYZ"}
        ]
        # a text-mode call: the tool's answer is the observation
        text_call = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
        step = c.post("/step", json={**gym_row(TOOL_ROW), "response": response(message(text_call))}).json()
        assert step["observation"] == "XYZ" and step["reward"] == 0.0
        final = c.post("/step", json={**gym_row(TOOL_ROW), "response": response(message("it is XYZ"))}).json()
        assert final["terminated"] is True and final["reward"] == 1.0 and final["info"]["turns"] == 3
        # the session closed with the episode
        again = c.post("/step", json={**gym_row(TOOL_ROW), "response": response(message("x"))})
        assert again.status_code == 404


def test_simple_agent_flow_with_a_route_per_tool():
    with (
        BackgroundServer("nemo-gym", LookupToolEnv(tasks=[TOOL_ROW])) as server,
        httpx.Client(base_url=server.url, timeout=30) as c,
    ):
        c.post("/seed_session", json=gym_row(TOOL_ROW))
        tool = c.post("/lookup", json={})
        assert tool.status_code == 200 and tool.json() == {"output": "XYZ"}
        assert c.post("/verify", json={}).status_code == 400  # reserved routes are never tools
        assert c.post("/a/b", json={}).status_code == 404  # nor are nested paths
        body = {
            **gym_row(TOOL_ROW),
            "response": response(
                call("lookup", {}),
                {"type": "function_call_output", "call_id": "call_1", "output": "XYZ"},
                message("XYZ"),
            ),
        }
        assert c.post("/verify", json=body).json()["reward"] == 1.0


def group_verify(url: str, row: dict[str, Any], text: str, index: int) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=30) as c:
        c.post("/seed_session", json=gym_row(row, _ng_task_index=index))
        body = {**gym_row(row, _ng_task_index=index), "response": response(message(text))}
        return c.post("/verify", json=body).json()


def test_group_scoring_waits_for_the_group_and_not_forever():
    env = LongestWinsEnv(tasks=[ROW])
    options = {"num_rollouts_per_prompt": 3, "group_deadline_s": 1.0}
    with BackgroundServer("nemo-gym", env, options=options) as server:

        async def group(texts: list[str], index: int) -> list[dict[str, Any]]:
            return list(
                await asyncio.gather(
                    *(asyncio.to_thread(group_verify, server.url, ROW, t, index) for t in texts)
                )
            )

        t0 = time.monotonic()
        full = asyncio.run(group(["a", "bbb", "cc"], 0))
        assert [r["reward"] for r in full] == [0.0, 1.0, 0.0] and time.monotonic() - t0 < 1.0
        want = asyncio.run(LongestWinsEnv(tasks=[ROW]).ascore_responses(ROW, ["a", "bbb", "cc"]))
        assert [r["reward"] for r in full] == [w.value for w in want]  # the env's own group scores
        t0 = time.monotonic()
        partial = asyncio.run(group(["a", "bbbb"], 1))  # a third rollout was lost
        assert 1.0 <= time.monotonic() - t0 < 5
        assert [r["reward"] for r in partial] == [0.0, 1.0] and not any(r["mask_sample"] for r in partial)
        alone = asyncio.run(group(["zzz"], 2))
        assert alone[0]["mask_sample"] is True and "group deadline" in alone[0]["reward_masked_reason"]
        assert server.served.handler.groups.pending() == 0


def test_a_group_env_needs_its_group_size():
    with pytest.raises(cascade_envs.CascadeError, match="num_rollouts_per_prompt"):
        BackgroundServer("nemo-gym", LongestWinsEnv(tasks=[ROW]))


# ----- bad input -------------------------------------------------------------------------------


def test_bad_input_is_a_clear_4xx(exact):
    with httpx.Client(base_url=exact.url, timeout=30) as c:
        assert c.post("/seed_session", content=b"{not json").status_code == 400
        assert c.post("/seed_session", json=[1, 2]).status_code == 400
        bad_row = c.post("/seed_session", json={"cascade_row": {"id": "x"}})
        assert bad_row.status_code == 400 and "prompt" in bad_row.json()["error"]
        assert len(exact.store) == 0  # a refused seed leaves no session behind
        c.cookies.clear()
        no_cookie = c.post("/verify", json={**gym_row(ROW), "response": response(message("4"))})
        assert no_cookie.status_code == 400 and "seed_session" in no_cookie.json()["error"]
        c.post("/seed_session", json=gym_row(ROW))
        for bad in ({"output": "x"}, {"output": [1]}, {"output": [{"type": "message", "content": 5}]}, None):
            r = c.post("/verify", json={**gym_row(ROW), "response": bad})
            assert r.status_code == 400, bad
        tokens = message("4", generation_token_ids=["a"])
        assert c.post("/verify", json={**gym_row(ROW), "response": response(tokens)}).status_code == 400
        assert c.post("/seed_session", content=b"x" * (9 << 20)).status_code == 413
        assert c.get("/verify").status_code == 405 and c.get("/nothing").status_code == 404


def test_sessions_are_isolated(exact):
    other = {"id": "q2", "prompt": "3+3?", "answer": "6"}
    env_rows = [ROW, other]
    with BackgroundServer("nemo-gym", ExactAnswerEnv(tasks=env_rows)) as server:
        a, b = httpx.Client(base_url=server.url), httpx.Client(base_url=server.url)
        a.post("/seed_session", json=gym_row(ROW))
        b.post("/seed_session", json=gym_row(other))
        assert a.cookies[COOKIE] != b.cookies[COOKIE]
        # b's cookie with a's row: refused, b's episode untouched
        wrong = b.post("/verify", json={**gym_row(ROW), "response": response(message("4"))})
        assert wrong.status_code == 409 and "one session per rollout" in wrong.json()["error"]
        # a made-up or stale session id: 404 / 400, never someone else's episode
        forged = httpx.post(server.url + "/lookup", json={}, cookies={COOKIE: "A" * 22})
        assert forged.status_code == 404
        assert httpx.post(server.url + "/step", json={}, cookies={COOKIE: "../x"}).status_code == 400
        assert (
            b.post("/verify", json={**gym_row(other), "response": response(message("6"))}).json()["reward"]
            == 1.0
        )
        assert (
            a.post("/verify", json={**gym_row(ROW), "response": response(message("5"))}).json()["reward"]
            == 0.0
        )
        a.close()
        b.close()


def test_thousand_sessions_never_closed_are_capped_and_expire():
    env = ExactAnswerEnv(tasks=[ROW])
    with BackgroundServer("nemo-gym", env, max_sessions=100, ttl_s=1.0) as server:
        statuses: list[int] = []
        retry_after = set()
        with httpx.Client(base_url=server.url, timeout=30) as c:
            for _ in range(1000):
                c.cookies.clear()
                r = c.post("/seed_session", json=gym_row(ROW))
                statuses.append(r.status_code)
                if r.status_code == 503:
                    retry_after.add(r.headers.get("retry-after"))
                assert len(server.store) <= 100
        assert statuses.count(200) >= 100 and set(statuses) <= {200, 503} and None not in retry_after
        deadline = time.monotonic() + 10
        while len(server.store) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(server.store) == 0 and server.store.expired >= 100  # the sweeper expired them all


def test_a_client_that_disconnects_mid_episode_leaves_the_server_serving(exact):
    with httpx.Client(base_url=exact.url, timeout=30) as c:
        c.post("/seed_session", json=gym_row(ROW))
        cookie = c.cookies[COOKIE]
        host, port = exact.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as raw:  # half a /verify, then gone
            raw.sendall(
                b"POST /verify HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n"
                + f"cookie: {COOKIE}={cookie}\r\n\r\n".encode()
                + b'{"response": '
            )
        # the session is intact and finishes normally
        done = c.post("/verify", json={**gym_row(ROW), "response": response(message("4"))})
        assert done.status_code == 200 and done.json()["reward"] == 1.0


def test_twenty_turn_episode_keeps_the_trainers_token_ids():
    """Each /step's generation_token_ids, log-probs and prompt ids reach the episode as sent (no
    re-tokenisation), turn by turn, over a 20-turn tool episode."""
    kept: list[list[Any]] = []

    class LongLookup(LookupToolEnv):
        max_turns = 25

        async def on_end(self, episode) -> None:
            kept.append([(c.token_ids, c.logprobs, c.prompt_token_ids, str(c)) for c in episode.completions])

    sent = []
    with (
        BackgroundServer("nemo-gym", LongLookup(tasks=[TOOL_ROW])) as server,
        httpx.Client(base_url=server.url, timeout=30) as c,
    ):
        c.post("/reset", json=gym_row(TOOL_ROW))
        prompt = list(range(5))
        for turn in range(20):
            text = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>' if turn < 19 else "XYZ"
            ids = [1000 + 10 * turn + k for k in range(3 + turn % 4)]
            lps = [-0.5 - k / 10 for k in range(len(ids))]
            tokens = {"prompt_token_ids": prompt, "generation_token_ids": ids, "generation_log_probs": lps}
            answer = c.post(
                "/step", json={**gym_row(TOOL_ROW), "response": response(message(text, **tokens))}
            )
            sent.append((ids, lps, prompt, text))
            prompt = prompt + ids + [7, 7]  # the next prompt: history + the env's answer tokens
        assert answer.json()["terminated"] is True and answer.json()["reward"] == 1.0
    assert kept == [sent]


def test_a_request_past_its_deadline_is_504_and_its_session_unusable():
    class SlowVerifier(ExactAnswerEnv):
        async def ascore(self, task, answer):
            await asyncio.sleep(5)
            return await super().ascore(task, answer)

    with (
        BackgroundServer("nemo-gym", SlowVerifier(tasks=[ROW]), request_deadline_s=0.3) as server,
        httpx.Client(base_url=server.url, timeout=30) as c,
    ):
        c.post("/seed_session", json=gym_row(ROW))
        t0 = time.monotonic()
        late = c.post("/verify", json={**gym_row(ROW), "response": response(message("4"))})
        assert late.status_code == 504 and time.monotonic() - t0 < 3
        again = c.post("/verify", json={**gym_row(ROW), "response": response(message("4"))})
        assert again.status_code == 409 and "deadline" in again.json()["error"]


def test_error_answers_keep_the_session_cookie_and_late_tool_calls_are_text():
    """NeMo Gym's simple agent keeps only the last answer's cookies, errors included."""
    with (
        BackgroundServer("nemo-gym", LookupToolEnv(tasks=[TOOL_ROW])) as server,
        httpx.Client(base_url=server.url, timeout=30) as c,
    ):
        c.post("/seed_session", json=gym_row(TOOL_ROW))
        cookie = c.cookies[COOKIE]
        error = c.post("/step", json={"response": {"output": "bad"}})
        assert error.status_code == 400 and f"{COOKIE}={cookie}" in error.headers["set-cookie"]
        for _ in range(3):  # the toy env's turn limit is 3: the third call ends the episode
            c.post("/lookup", json={})
        late = c.post("/lookup", json={})
        assert late.status_code == 200 and "episode has ended" in late.json()["output"]
        assert f"{COOKIE}={cookie}" in late.headers["set-cookie"]
        final = c.post("/verify", json={**gym_row(TOOL_ROW), "response": response(message("XYZ"))}).json()
        assert final["reward"] == 0.0 and final["mask_sample"] is False  # truncated at the turn limit
