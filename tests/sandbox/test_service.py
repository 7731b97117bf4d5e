"""The verification service over real HTTP: scoring, back-pressure, deadlines, bad requests, hostile code."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from cascade_envs.envs.code.env import CodeEnv
from cascade_envs.envs.code.service import BackgroundService as Server

TASK = {
    "prompt": "add",
    "verifier_metadata": {"unit_tests": {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}},
}
GOOD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
BAD = "```python\nprint(3)\n```"
SLEEPY = "```python\nimport time\ntime.sleep(30)\n```"


@pytest.fixture(scope="module")
def server():
    s = Server(workers=2, max_queue=8)
    yield s
    s.close()


def post(url, path, body, timeout=60):
    return httpx.post(
        url + path, content=body if isinstance(body, bytes) else json.dumps(body), timeout=timeout
    )


def test_env_scores_through_the_service_like_locally(server):
    remote = CodeEnv(tasks=[TASK], verifier_url=server.url, time_limit_s=2)
    local = CodeEnv(tasks=[TASK], time_limit_s=2)
    for answer in (GOOD, BAD, "no code"):
        a = asyncio.run(remote.areward(TASK, answer))
        b = asyncio.run(local.areward(TASK, answer))
        assert (a.value, a.reason, a.masked) == (b.value, b.reason, b.masked)
    remote.close()


def test_health_run_and_bad_requests(server):
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ok" and health["workers"] == 2 and health["backend"] in ("bwrap", "local")
    ran = post(
        server.url,
        "/run",
        {
            "argv": ["/usr/bin/python3", "m.py"],
            "files": {"m.py": "print(input())"},
            "stdin": "hi\n",
            "timeout_s": 2,
        },
    ).json()
    assert ran["stdout"] == "hi\n" and ran["exit_code"] == 0
    assert post(server.url, "/nope", {}).status_code == 404
    assert post(server.url, "/verify", b"{not json").status_code == 400
    assert post(server.url, "/verify", [1, 2]).status_code == 400
    assert post(server.url, "/verify", {"task": "x"}).status_code == 400
    assert post(server.url, "/run", {"argv": []}).status_code == 400
    assert post(server.url, "/run", {"argv": ["true"], "files": {"/etc/x": "y"}}).status_code == 400
    masked = post(server.url, "/verify", {"task": {"verifier_metadata": {}}, "answer": GOOD}).json()["reward"]
    assert masked["masked"] and "malformed task" in masked["error"]


def test_hostile_code_leaves_the_service_healthy(server):
    bomb = "```python\nimport os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n```"
    for answer in (
        bomb,
        "```python\nx = bytearray(1 << 34)\n```",
        "```python\nimport os\nos.kill(1, 9)\n```",
    ):
        reward = post(
            server.url, "/verify", {"task": TASK, "answer": answer, "config": {"time_limit_s": 1}}
        ).json()
        assert reward["reward"]["value"] == 0
    assert post(server.url, "/verify", {"task": TASK, "answer": GOOD}).json()["reward"]["value"] == 1


def test_back_pressure_and_deadlines():
    s = Server(workers=1, max_queue=1)
    try:

        async def burst():
            async with httpx.AsyncClient(timeout=120) as client:
                body = {"task": TASK, "answer": SLEEPY, "deadline_s": 1.0, "config": {"time_limit_s": 20}}
                return await asyncio.gather(*(client.post(s.url + "/verify", json=body) for _ in range(4)))

        codes = sorted(r.status_code for r in asyncio.run(burst()))
        assert codes.count(429) >= 1  # one runs, one may queue, the rest are turned away at once
        assert 504 in codes  # the running one passed its deadline
        assert set(codes) <= {429, 503, 504}
        health = httpx.get(s.url + "/health").json()
        assert health["rejected"] >= 1 and health["expired"] >= 1
        # the client retries 429s until it gets a slot; everyone is served in the end
        env = CodeEnv(tasks=[TASK], verifier_url=s.url, time_limit_s=2)

        async def many():
            return await asyncio.gather(*(env.areward(TASK, GOOD) for _ in range(5)))

        assert [r.value for r in asyncio.run(many())] == [1.0] * 5
    finally:
        s.close()


def test_load_spreads_over_several_services_and_skips_a_dead_one(server):
    with Server(workers=1) as other:
        env = CodeEnv(
            tasks=[TASK], verifier_url=f"{server.url},{other.url},http://127.0.0.1:9", time_limit_s=2
        )

        async def many():
            return await asyncio.gather(*(env.areward(TASK, GOOD) for _ in range(6)))

        before = httpx.get(other.url + "/health").json()["served"]
        assert [r.value for r in asyncio.run(many())] == [1.0] * 6
        assert httpx.get(other.url + "/health").json()["served"] > before


def test_an_unreachable_service_gives_masked_rewards():
    env = CodeEnv(tasks=[TASK], verifier_url="http://127.0.0.1:9", verifier_timeout_s=2)
    reward = asyncio.run(env.areward(TASK, GOOD))
    assert reward.masked and "unreachable" in reward.error


# ----- hardening: typed fields, strict JSON, body limit, timeouts, no stalled loop ----------------

EXCEPTION_NAME = re.compile(r"\b[A-Z]\w*(Error|Exception)\b")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/verify", {"task": TASK, "answer": GOOD, "config": "fast"}, "config"),
        ("/verify", {"task": TASK, "answer": GOOD, "config": [1]}, "config"),
        ("/verify", {"task": TASK, "answer": GOOD, "config": {"time_limit_s": "abc"}}, "config.time_limit_s"),
        ("/verify", {"task": TASK, "answer": GOOD, "config": {"time_limit_s": -1}}, "config.time_limit_s"),
        ("/verify", {"task": TASK, "answer": GOOD, "config": {"memory_mb": 1.5}}, "config.memory_mb"),
        (
            "/verify",
            {"task": TASK, "answer": GOOD, "config": {"stop_at_first_failure": "no"}},
            "config.stop_at_first_failure",
        ),
        ("/verify", {"task": TASK, "answer": GOOD, "deadline_s": "soon"}, "deadline_s"),
        ("/verify", {"task": TASK, "answer": GOOD, "deadline_s": [5]}, "deadline_s"),
        ("/verify", {"task": TASK, "answer": GOOD, "deadline_s": {"s": 5}}, "deadline_s"),
        ("/verify", {"task": TASK, "answer": GOOD, "deadline_s": -3}, "deadline_s"),
        ("/verify", {"task": [TASK], "answer": GOOD}, "task"),
        ("/verify", {"task": TASK, "answer": 7}, "answer"),
        ("/run", {"argv": ["true"], "files": ["m.py"]}, "files"),
        ("/run", {"argv": ["true"], "files": "m.py"}, "files"),
        ("/run", {"argv": ["true"], "files": {"m.py": 3}}, "files.m.py"),
        ("/run", {"argv": ["true"], "files": {"m.py": {"x": 1}}}, "files.m.py"),
        ("/run", {"argv": ["true"], "stdin": 5}, "stdin"),
        ("/run", {"argv": ["true"], "timeout_s": "2"}, "timeout_s"),
        ("/run", {"argv": ["true"], "memory_mb": "big"}, "memory_mb"),
        ("/run", {"argv": ["true"], "deadline_s": "x"}, "deadline_s"),
        ("/run", {"argv": "true"}, "argv"),
    ],
)
def test_mistyped_fields_are_400_naming_the_field(server, path, body, field):
    response = post(server.url, path, body)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["field"] == field and repr(field) in error["error"]
    assert not EXCEPTION_NAME.search(error["error"]), error  # no Python exception text


@pytest.mark.parametrize(
    "body",
    [
        b'{"task": {"verifier_metadata": {"x": NaN}}, "answer": "a"}',
        b'{"task": {"verifier_metadata": {}}, "answer": "a", "extra": Infinity}',
        b'{"task": {"verifier_metadata": {}}, "answer": "a", "extra": [-Infinity]}',
        b'{"task": {"verifier_metadata": {}}, "answer": "a", "extra": 1e999}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"task": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b', "answer": "a"}',
    ],
    ids=["nan", "infinity", "minus-infinity", "overflow", "deep-list", "deep-object"],
)
def test_non_finite_numbers_and_deep_nesting_are_400(server, body):
    response = post(server.url, "/verify", body)
    assert response.status_code == 400, response.text[:300]
    assert "invalid JSON" in response.json()["error"]
    assert post(server.url, "/verify", {"task": TASK, "answer": GOOD}).json()["reward"]["value"] == 1


def test_body_limit_is_a_few_mb_with_413_past_it(server):
    from cascade_envs.envs.code.service import MAX_BODY_MB

    limit = int(MAX_BODY_MB * (1 << 20))
    assert limit <= 16 << 20
    answer = GOOD + "\n" + "x" * (limit - 4096)
    body = json.dumps({"task": TASK, "answer": answer}).encode()
    assert len(body) <= limit
    assert post(server.url, "/verify", body).json()["reward"]["value"] == 1  # a body at the limit is served
    response = post(server.url, "/verify", b" " * (limit + 1))
    assert response.status_code == 413 and "limit" in response.json()["error"]
    # a chunked body (no content-length) is cut off at the limit too
    with Server(workers=1, max_body_mb=0.25) as small:

        def chunks():
            for _ in range(64):
                yield b" " * 8192

        response = httpx.post(small.url + "/verify", content=chunks(), timeout=30)
        assert response.status_code == 413
        assert post(small.url, "/verify", {"task": TASK, "answer": GOOD}).status_code == 200


def test_an_answer_over_the_body_limit_is_its_own_0_and_a_task_over_it_masks():
    """Attack: an answer padded past the service's body limit (413) must not buy a mask; the client
    sends the task with an empty answer as a control, and only a task too large on its own masks."""
    with Server(workers=1, max_body_mb=0.25) as small:
        env = CodeEnv(tasks=[TASK], verifier_url=small.url, time_limit_s=2)
        try:
            padded = GOOD + "\n# " + "x" * (300 << 10)
            reward = asyncio.run(env.areward(TASK, padded))
            assert (reward.value, reward.masked) == (0.0, False)
            assert (
                reward.reason.startswith("verifier limit: the answer (")
                and "request size limit" in reward.reason
            )
            assert asyncio.run(env.areward(TASK, GOOD)).value == 1.0  # the service still serves
            huge_task = {
                "prompt": "add",
                "verifier_metadata": {"unit_tests": {"inputs": ["1 2\n" * (80 << 10)], "outputs": ["3\n"]}},
            }
            reward = asyncio.run(env.areward(huge_task, GOOD))
            assert reward.masked and "the task alone failed too" in reward.error
        finally:
            env.close()


def test_idle_and_slow_connections_time_out():
    with Server(workers=1, idle_timeout_s=0.5, request_timeout_s=1.5) as s:
        host, port = s.url.removeprefix("http://").split(":")
        # a connection that never sends anything is closed
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            start = time.monotonic()
            assert sock.recv(1024) == b""
            assert time.monotonic() - start < 3
        # a request whose body stops arriving gets 408
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b'POST /verify HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"task"')
            start = time.monotonic()
            reply = sock.recv(4096)
            assert reply.startswith(b"HTTP/1.1 408") and time.monotonic() - start < 3
        # a request trickled in byte by byte (never idle long) is cut off at request_timeout_s
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            start = time.monotonic()
            sock.sendall(b"POST /verify HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n")
            reply = b""
            with contextlib.suppress(OSError):
                while not reply and time.monotonic() - start < 6:
                    sock.sendall(b" ")
                    time.sleep(0.2)
                    sock.setblocking(False)
                    with contextlib.suppress(BlockingIOError):
                        reply = sock.recv(4096)
                    sock.setblocking(True)
            assert reply.startswith(b"HTTP/1.1 408") and time.monotonic() - start < 4
        # a keep-alive connection is still served between requests
        with httpx.Client(timeout=10) as client:
            assert client.get(s.url + "/health").status_code == 200
            assert client.get(s.url + "/health").status_code == 200


@pytest.fixture
def service_process():
    """The service in its own process (a stalled loop there cannot hang the test process)."""
    code = "from cascade_envs.envs.code.service import serve_sandbox; serve_sandbox(port=0, workers=2)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://[\d.]+:\d+", line)
        assert url, line
        yield url.group(0)
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.parametrize(
    "answer",
    [
        lambda n: "```" + "a" * n + "`",  # quadratic for the old fence pattern
        lambda n: "```\n```\n" * (n // 8),  # a million empty blocks: all Python-level work
        lambda n: "```py\n" + " \n" * (n // 2),  # one unclosed fence
    ],
    ids=["backtracking-fence", "many-blocks", "unclosed"],
)
def test_a_max_size_adversarial_body_does_not_stall_other_requests(service_process, answer):
    from cascade_envs.envs.code import service

    limit = int(getattr(service, "MAX_BODY_MB", 8) * (1 << 20))
    body = json.dumps({"task": TASK, "answer": answer(limit)}).encode()
    body = json.dumps({"task": TASK, "answer": answer(int(limit * limit / len(body)) - 4096)}).encode()
    assert limit - (64 << 10) < len(body) <= limit  # JSON escapes grow the answer: sized to just fit
    big: dict = {}

    def send():
        big["response"] = httpx.post(service_process + "/verify", content=body, timeout=120)

    with httpx.Client(timeout=5) as client:
        assert client.get(service_process + "/health").status_code == 200
        sender = threading.Thread(target=send)
        sender.start()
        worst = 0.0
        while sender.is_alive():
            start = time.monotonic()
            assert client.get(service_process + "/health").status_code == 200
            worst = max(worst, time.monotonic() - start)
            time.sleep(0.02)
        sender.join()
    assert big["response"].status_code == 200 and big["response"].json()["reward"]["value"] == 0
    assert worst < 1.0, f"a small request waited {worst:.2f}s behind the big one"


def test_a_sandbox_that_cannot_start_is_a_500_naming_it_not_a_bad_request():
    from cascade_envs.envs.code.service import HTTPError, VerifyService
    from cascade_envs.sandbox import get_sandbox

    service = VerifyService(
        workers=1, backend=get_sandbox("unsafe-subprocess", python="/nonexistent/python3")
    )
    with pytest.raises(HTTPError) as info:
        asyncio.run(service.run({"argv": ["true"]}))
    assert (
        info.value.status == 500
        and "sandbox failure" in str(info.value)
        and "did not start" in str(info.value)
    )
