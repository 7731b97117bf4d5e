"""The verification service over real HTTP: scoring, back-pressure, deadlines, bad requests, hostile code."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from cascade_envs.envs.code.env import CodeEnv
from cascade_envs.envs.code.service import BackgroundService as Server

TASK = {"prompt": "add", "verifier_metadata": {"unit_tests": {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}}}
GOOD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
BAD = "```python\nprint(3)\n```"
SLEEPY = "```python\nimport time\ntime.sleep(30)\n```"


@pytest.fixture(scope="module")
def server():
    s = Server(workers=2, max_queue=8)
    yield s
    s.close()


def post(url, path, body, timeout=60):
    return httpx.post(url + path, content=body if isinstance(body, bytes) else json.dumps(body), timeout=timeout)


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
    ran = post(server.url, "/run", {"argv": ["/usr/bin/python3", "m.py"], "files": {"m.py": "print(input())"},
                                    "stdin": "hi\n", "timeout_s": 2}).json()
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
    for answer in (bomb, "```python\nx = bytearray(1 << 34)\n```", "```python\nimport os\nos.kill(1, 9)\n```"):
        reward = post(server.url, "/verify", {"task": TASK, "answer": answer, "config": {"time_limit_s": 1}}).json()
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
        env = CodeEnv(tasks=[TASK], verifier_url=f"{server.url},{other.url},http://127.0.0.1:9", time_limit_s=2)

        async def many():
            return await asyncio.gather(*(env.areward(TASK, GOOD) for _ in range(6)))

        before = httpx.get(other.url + "/health").json()["served"]
        assert [r.value for r in asyncio.run(many())] == [1.0] * 6
        assert httpx.get(other.url + "/health").json()["served"] > before


def test_an_unreachable_service_gives_masked_rewards():
    env = CodeEnv(tasks=[TASK], verifier_url="http://127.0.0.1:9", verifier_timeout_s=2)
    reward = asyncio.run(env.areward(TASK, GOOD))
    assert reward.masked and "unreachable" in reward.error
