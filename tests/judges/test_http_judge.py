"""HTTPJudge against real local chat-completions servers: replies, retries, timeouts, bad bodies, spreading."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from cascade_envs.judges import JUDGE_API_KEY_ENV, HTTPJudge, JudgeError
from cascade_envs.judges.http_judge import reply_text, served_model
from tests.chat_server import ScriptedChatServer, Step, completion

ASK = [{"role": "user", "content": "Is the answer right?"}]


def run(make: Callable[[], HTTPJudge], use: Callable[[HTTPJudge], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        judge = make()
        try:
            return await use(judge)
        finally:
            await judge.aclose()

    return asyncio.run(main())


def ask(judge: HTTPJudge, **sampling: Any) -> Awaitable[str]:
    return judge.acomplete(ASK, **sampling)


def fast(url: str | list[str], **kwargs: Any) -> Callable[[], HTTPJudge]:
    """A judge with short backoff, so retry tests take milliseconds."""
    options: dict[str, Any] = {"model": "judge", "timeout_s": 5.0, "backoff_s": 0.01, **kwargs}
    return lambda: HTTPJudge(url, **options)


def test_reply_text_and_request_body(monkeypatch):
    monkeypatch.delenv(JUDGE_API_KEY_ENV, raising=False)
    with ScriptedChatServer([Step("VERDICT: yes")]) as server:
        reply = run(fast(server.url), lambda j: ask(j, max_tokens=64, temperature=0.6, top_p=0.95))
    assert reply == "VERDICT: yes"
    assert server.requests == [
        {"model": "judge", "messages": ASK, "max_tokens": 64, "temperature": 0.6, "top_p": 0.95}
    ]
    assert "Authorization" not in server.headers[0]


def test_api_key_from_the_argument_or_the_judge_variable_only(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-hosted")  # never sent to a judge
    monkeypatch.setenv(JUDGE_API_KEY_ENV, "from-env")
    with ScriptedChatServer() as server:
        run(fast(server.url), ask)
        run(fast(server.url, api_key="explicit"), ask)
    assert [h["Authorization"] for h in server.headers] == ["Bearer from-env", "Bearer explicit"]


def test_a_slow_reply_within_the_timeout_is_kept():
    with ScriptedChatServer([Step("late but fine", delay_s=0.3)]) as server:
        start = time.perf_counter()
        assert run(fast(server.url, timeout_s=2.0), ask) == "late but fine"
    assert time.perf_counter() - start >= 0.3
    assert len(server.requests) == 1


def test_5xx_then_success_is_retried():
    steps = [Step(status=503), Step(status=500), Step("VERDICT: no")]
    with ScriptedChatServer(steps) as server:
        judge = fast(server.url)()
        assert run(lambda: judge, ask) == "VERDICT: no"
    assert len(server.requests) == 3
    assert judge.stats["retries"] == 2 and judge.stats["failures"] == 0


def test_5xx_forever_fails_after_the_retries_in_bounded_time():
    with ScriptedChatServer(default=Step(status=502)) as server:
        start = time.perf_counter()
        with pytest.raises(JudgeError, match=r"HTTP 502.*after 3 attempts"):
            run(fast(server.url, max_retries=2), ask)
    assert len(server.requests) == 3
    assert time.perf_counter() - start < 2.0


def test_the_retry_budget_bounds_a_call_whatever_max_retries_says():
    with ScriptedChatServer(default=Step(status=503, delay_s=0.1)) as server:
        start = time.perf_counter()
        with pytest.raises(JudgeError, match="retry budget"):
            run(fast(server.url, max_retries=1000, retry_budget_s=0.5), ask)
    assert time.perf_counter() - start < 1.5


def test_a_timeout_is_retried_then_fails():
    with ScriptedChatServer(default=Step("too late", delay_s=3.0)) as server:
        start = time.perf_counter()
        with pytest.raises(JudgeError, match=r"deadline of 0\.3 s|timed out"):
            run(fast(server.url, timeout_s=0.3, max_retries=1), ask)
        elapsed = time.perf_counter() - start
    assert len(server.requests) == 2
    assert 0.6 <= elapsed < 2.0


def test_a_timeout_then_a_reply_succeeds():
    with ScriptedChatServer([Step("too late", delay_s=2.0), Step("in time")]) as server:
        assert run(fast(server.url, timeout_s=0.3), ask) == "in time"


def test_a_4xx_is_not_retried():
    with (
        ScriptedChatServer(default=Step(status=400)) as server,
        pytest.raises(JudgeError, match=r"HTTP 400.*after 1 attempt\)"),
    ):
        run(fast(server.url), ask)
    assert len(server.requests) == 1


def test_a_body_that_is_not_json_is_retried_then_fails():
    with (
        ScriptedChatServer(default=Step(raw=b"<html>gateway</html>")) as server,
        pytest.raises(JudgeError, match="malformed JSON"),
    ):
        run(fast(server.url, max_retries=1), ask)
    assert len(server.requests) == 2


def test_a_body_that_is_not_json_then_a_good_one():
    with ScriptedChatServer([Step(raw=b"{truncated"), Step("fine")]) as server:
        assert run(fast(server.url), ask) == "fine"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"object": "chat.completion"}, "no choices"),
        ({"choices": []}, "no choices"),
        ({"choices": [{"index": 0}]}, "has no message"),
        (completion(None), "content is missing"),
        (completion(None, reasoning_content="The answer is right. VERDICT: yes"), "content is missing"),
        (completion(["VERDICT: yes"]), "content is a list"),
        ([1, 2], "not an object"),
    ],
)
def test_a_reply_without_text_is_a_judge_error(body, problem):
    with ScriptedChatServer([Step(body=body)]) as server, pytest.raises(JudgeError, match=problem):
        run(fast(server.url), ask)
    assert len(server.requests) == 1  # a well-formed HTTP answer: not retried


def test_an_empty_reply_is_text():
    assert reply_text(completion("")) == ""


def test_the_model_is_asked_once_when_not_given():
    with ScriptedChatServer(models=("served-judge",)) as server:
        judge = HTTPJudge(server.url, timeout_s=5.0)

        async def many(j: HTTPJudge) -> list[str]:
            return await asyncio.gather(*(ask(j) for _ in range(5)))

        assert run(lambda: judge, many) == ["ok"] * 5
    assert server.model_lookups == 1
    assert judge.model == "served-judge"
    assert {r["model"] for r in server.requests} == {"served-judge"}


def test_several_served_models_need_a_model_name():
    with (
        ScriptedChatServer(models=("a", "b")) as server,
        pytest.raises(JudgeError, match=r"serves 2 models \(a, b\): pass judge_model="),
    ):
        run(lambda: HTTPJudge(server.url, timeout_s=5.0), ask)
    assert server.requests == []
    with pytest.raises(JudgeError, match="serves 0 models"):
        served_model({"data": []}, "http://x/v1")
    with pytest.raises(JudgeError, match="malformed model list"):
        served_model({"models": ["a"]}, "http://x/v1")


def test_concurrency_per_endpoint_is_honoured():
    with ScriptedChatServer(default=Step(delay_s=0.1)) as server:

        async def burst(j: HTTPJudge) -> list[str]:
            return await asyncio.gather(*(ask(j) for _ in range(12)))

        assert run(fast(server.url, concurrency=3), burst) == ["ok"] * 12
    assert server.max_in_flight == 3


def test_calls_spread_over_urls_least_busy_first():
    servers = [ScriptedChatServer(default=Step(delay_s=0.15)) for _ in range(3)]
    for server in servers:
        server.__enter__()
    try:

        async def burst(j: HTTPJudge) -> list[str]:
            return await asyncio.gather(*(ask(j) for _ in range(24)))

        assert run(fast([s.url for s in servers], concurrency=4), burst) == ["ok"] * 24
    finally:
        for server in servers:
            server.__exit__()
    assert [s.max_in_flight for s in servers] == [4, 4, 4]  # each full, none over its limit
    assert min(len(s.requests) for s in servers) >= 6  # 8 each, give or take a slow wave


def test_a_server_that_is_down_is_avoided():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    with ScriptedChatServer() as server:

        async def calls(j: HTTPJudge) -> list[str]:
            return [await ask(j) for _ in range(6)]

        assert run(fast(f"{dead},{server.url}"), calls) == ["ok"] * 6
    assert len(server.requests) == 6


def test_one_judge_serves_several_event_loops():
    with ScriptedChatServer() as server:
        judge = fast(server.url)()
        assert run(lambda: judge, ask) == "ok"
        assert run(lambda: judge, ask) == "ok"  # a new loop: a new connection pool
    assert judge.stats["succeeded"] == 2


@pytest.mark.parametrize("kwargs", [{"concurrency": 0}, {"timeout_s": 0}, {"max_retries": -1}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError, match="HTTPJudge"):
        HTTPJudge("http://127.0.0.1:1/v1", **kwargs)
    with pytest.raises(ValueError, match="no judge URL"):
        HTTPJudge(" , ")
