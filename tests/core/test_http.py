"""The retrying JSON client against a real HTTP server on 127.0.0.1 (tests/chat_server.py)."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from cascade_envs import CascadeError
from cascade_envs.http import HTTPRequestError, RetryingClient


def base(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def request(client: RetryingClient, path: str, body=None, method: str = "POST"):
    async def go():
        async with client:
            return await client.request_json(method, path, body)

    return asyncio.run(go())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_json_round_trip_and_stats(chat_server):
    client = RetryingClient(base(chat_server) + "/", headers={"Authorization": "Bearer x"})
    assert request(client, "/http/ok", {"a": [1, 2]}) == {"ok": True, "body": {"a": [1, 2]}}
    assert request(client, "http/ok", method="GET") == {"ok": True, "body": None}
    assert client.stats["requests"] == 2 and client.stats["succeeded"] == 2 and client.stats["retries"] == 0


def test_retryable_status_then_success(chat_server):
    client = RetryingClient(base(chat_server), max_retries=3, backoff_s=0.01)
    assert request(client, "/http/flaky/a/2") == {"ok": True, "attempt": 3}
    assert (
        client.stats["retries"] == 2
        and client.stats["retry.status_503"] == 2
        and client.stats["failures"] == 0
    )
    assert "2 retries (status_503 2)" in client.summary()


@pytest.mark.parametrize("status", [500, 502, 408, 429])
def test_retries_run_out(chat_server, status):
    client = RetryingClient(base(chat_server), max_retries=2, backoff_s=0.01)
    with pytest.raises(HTTPRequestError) as info:
        request(client, f"/http/status/{status}")
    err = info.value
    assert isinstance(err, CascadeError)
    assert err.status == status and err.attempts == 3 and err.method == "POST"
    assert (
        err.url.endswith(f"/http/status/{status}")
        and f"HTTP {status}" in str(err)
        and "3 attempts" in str(err)
    )
    assert chat_server.calls[f"/http/status/{status}"] == 3
    assert client.stats["failures"] == 1 and client.stats[f"failure.status_{status}"] == 1


def test_client_errors_raise_at_once_with_status_and_body(chat_server):
    client = RetryingClient(base(chat_server), max_retries=5, backoff_s=0.01)
    with pytest.raises(HTTPRequestError) as info:
        request(client, "/http/status/400")
    err = info.value
    assert err.status == 400 and err.attempts == 1 and chat_server.calls["/http/status/400"] == 1
    assert "maximum context length" in err.body  # the caller can classify the answer
    assert "after 1 attempt)" in str(err) and client.stats["retries"] == 0
    with pytest.raises(HTTPRequestError, match="HTTP 404"):
        request(RetryingClient(base(chat_server)), "/http/nope")


def test_malformed_json_is_retried_then_reported(chat_server):
    client = RetryingClient(base(chat_server), max_retries=1, backoff_s=0.01)
    with pytest.raises(HTTPRequestError, match="malformed JSON") as info:
        request(client, "/http/garbage")
    assert info.value.attempts == 2 and info.value.status == 200 and client.stats["retry.malformed_json"] == 1


def test_a_trickling_answer_is_cut_off_at_the_deadline(chat_server):
    # one byte per 0.2 s over 100 bytes: httpx's per-read timeout (5 s) never fires, the deadline does
    client = RetryingClient(base(chat_server), timeout_s=5, deadline_s=1.0, max_retries=0)
    started = time.monotonic()
    with pytest.raises(HTTPRequestError, match="deadline of 1 s") as info:
        request(client, "/http/trickle/0.2/100", method="GET")
    assert time.monotonic() - started < 3.0
    assert info.value.status is None and info.value.attempts == 1 and client.stats["failure.deadline"] == 1


def test_the_deadline_covers_a_slow_server_and_is_retried(chat_server):
    client = RetryingClient(base(chat_server), timeout_s=10, deadline_s=0.3, max_retries=1, backoff_s=0.01)
    started = time.monotonic()
    with pytest.raises(HTTPRequestError, match="deadline"):
        request(client, "/http/sleep/2")
    assert time.monotonic() - started < 1.5 and client.stats["retry.deadline"] == 1


def test_retries_stop_when_the_budget_is_spent(chat_server):
    client = RetryingClient(
        base(chat_server), max_retries=1000, backoff_s=0.05, max_backoff_s=0.2, retry_budget_s=1.0
    )
    started = time.monotonic()
    with pytest.raises(HTTPRequestError, match=r"retry budget of 1 s spent") as info:
        request(client, "/http/status/503")
    elapsed = time.monotonic() - started
    assert elapsed < 1.5
    assert 3 <= info.value.attempts < 1000 and info.value.status == 503
    assert (
        chat_server.calls["/http/status/503"] == info.value.attempts and client.stats["failure.budget"] == 1
    )


def test_throttling_is_bounded_by_the_budget_not_the_retry_count(chat_server):
    client = RetryingClient(
        base(chat_server), max_retries=1, backoff_s=0.02, max_backoff_s=0.05, retry_budget_s=0.5
    )
    with pytest.raises(HTTPRequestError, match="budget") as info:
        request(client, "/http/status/429")
    assert info.value.attempts > 2  # 429s did not count against max_retries=1
    with pytest.raises(HTTPRequestError) as info:
        request(RetryingClient(base(chat_server), max_retries=1, backoff_s=0.01), "/http/status/429")
    assert info.value.attempts == 2  # without a budget they do


def test_an_unreachable_server_is_a_transport_error():
    client = RetryingClient(f"http://127.0.0.1:{free_port()}", max_retries=2, backoff_s=0.01)
    with pytest.raises(HTTPRequestError, match="connection failed") as info:
        request(client, "/x")
    assert info.value.status is None and info.value.attempts == 3 and client.stats["retry.transport"] == 2


def test_several_servers_route_around_a_dead_one(chat_server):
    dead = f"http://127.0.0.1:{free_port()}"
    client = RetryingClient([dead, base(chat_server)], max_retries=2, backoff_s=0.01)

    async def go():
        async with client:
            first = await asyncio.gather(*(client.request_json("GET", "/http/ok") for _ in range(6)))
            refused = client.stats["retry.transport"]
            second = await asyncio.gather(*(client.request_json("GET", "/http/ok") for _ in range(6)))
            return first + second, refused

    answers, refused = asyncio.run(go())
    assert all(r["ok"] for r in answers) and client.stats["succeeded"] == 12
    assert 1 <= refused <= 3 and client.stats["retry.transport"] == refused  # then the dead one is tried last


def test_concurrency_limits_requests_in_flight(chat_server):
    client = RetryingClient(base(chat_server), concurrency=2)

    async def go():
        async with client:
            started = time.monotonic()
            await asyncio.gather(*(client.request_json("GET", "/http/sleep/0.3") for _ in range(4)))
            return time.monotonic() - started

    assert asyncio.run(go()) >= 0.55  # two waves of two


def test_keeps_no_cookies_and_sends_a_callers_own(chat_server):
    """Callers share one client: a cookie one answer sets never rides on another caller's request."""
    client = RetryingClient(base(chat_server))

    async def go():
        async with client:
            first = await client.exchange("GET", "/http/cookie/a")
            plain = await client.request_json("GET", "/http/cookie/b")
            own = await client.request_json("GET", "/http/cookie/c", headers={"Cookie": "s=mine"})
            return first, plain, own

    first, plain, own = asyncio.run(go())
    assert first.data == {"cookie": None} and first.headers["set-cookie"].startswith("s=a;")
    assert plain == {"cookie": None}  # the jar kept nothing of the first answer
    assert own == {"cookie": "s=mine"}


def test_bad_arguments():
    with pytest.raises(ValueError):
        RetryingClient(["http://a", ""])
    with pytest.raises(ValueError):
        RetryingClient("http://a", max_retries=-1)
