"""Server throughput of ``cascade-envs serve --protocol nemo-gym`` against NeMo Gym's own MCQA
resources server on the same rows, and the per-episode cost of either against calling the env directly.

An episode is what NeMo Gym's ``simple_agent`` asks of a resources server for one rollout:
``POST /seed_session`` then ``POST /verify`` with a fixed model answer (no model in the loop), each
client session with its own cookies. Both servers run in processes of their own (one worker each);
one load generator (asyncio + aiohttp) keeps 1, 8 and 64 sessions busy and prints episodes/s for
each, the ratio ours / NeMo Gym's, and the in-process rate of ``Env.astart/aadvance/ascore_episodes``
(the adapter's overhead is the gap). Needs nemo-gym (Python >= 3.12: ``bash .ci/nemo_gym.sh``
builds ``.venv-nemo-gym``):

    .venv-nemo-gym/bin/python bench/bench_integrations.py [--episodes 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from typing import Any

import httpx

import cascade_envs
from cascade_envs.integrations.nemo_gym.export import gym_row

GYM_MCQA = """
import sys, uvicorn
from omegaconf import OmegaConf
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.server_utils import ServerClient
from resources_servers.mcqa.app import MCQAResourcesServer, MCQAResourcesServerConfig
port = int(sys.argv[1])
client = ServerClient(head_server_config=BaseServerConfig(host="127.0.0.1", port=1), global_config_dict=OmegaConf.create({}))
config = MCQAResourcesServerConfig(host="127.0.0.1", port=port, entrypoint="app.py", name="mcqa")
app = MCQAResourcesServer(config=config, server_client=client).setup_webserver()
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answer(text: str) -> dict[str, Any]:
    """A complete Responses API object (NeMo Gym validates it) holding one assistant message."""
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {
        "id": "resp_bench",
        "object": "response",
        "created_at": 0.0,
        "model": "bench",
        "output": [
            {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": content}
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def wait_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server {url} exited with {proc.returncode}")
        try:
            httpx.post(url + "/seed_session", json={}, timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise RuntimeError(f"server {url} did not start")


def cookies_of(response: Any) -> dict[str, str]:
    """``name=value`` of each ``Set-Cookie`` header (what NeMo Gym's agents pass to the next call)."""
    pairs = (h.split(";", 1)[0].partition("=") for h in response.headers.getall("set-cookie", []))
    return {name.strip(): value for name, _, value in pairs}


async def load(
    url: str, bodies: list[tuple[dict[str, Any], dict[str, Any]]], sessions: int, episodes: int
) -> float:
    """Episodes/s with ``sessions`` clients each playing seed_session + verify in a loop (aiohttp,
    as NeMo Gym's own clients; httpx's per-request overhead would dominate the measurement)."""
    import aiohttp

    done = 0
    failures = 0

    async def client(k: int) -> None:
        nonlocal done, failures
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(url, connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as c:
            i = k
            while done < episodes:
                seed, verify = bodies[i % len(bodies)]
                i += sessions
                async with c.post("/seed_session", json=seed) as r1:
                    await r1.read()
                    cookies = cookies_of(r1)
                async with c.post("/verify", json=verify, cookies=cookies) as r2:
                    answer = await r2.json()
                if r1.status != 200 or r2.status != 200 or "reward" not in answer:
                    failures += 1
                done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(sessions)))
    elapsed = time.perf_counter() - t0
    if failures:
        raise RuntimeError(f"{url}: {failures} episodes failed")
    return done / elapsed


async def direct(env: Any, items: list[Any], texts: list[str], sessions: int, episodes: int) -> float:
    """Episodes/s of the env called in process (astart, aadvance, ascore_episodes, aend)."""
    done = 0

    async def worker(k: int) -> None:
        nonlocal done
        i = k
        while done < episodes:
            episode = await env.astart(items[i % len(items)])
            await env.aadvance(episode, texts[i % len(items)])
            await env.ascore_episodes([episode])
            await env.aend(episode)
            i += sessions
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(sessions)))
    return done / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300, help="episodes per measurement (default 300)")
    parser.add_argument("--sessions", default="1,8,64", help="concurrent sessions (default 1,8,64)")
    args = parser.parse_args()
    levels = [int(x) for x in args.sessions.split(",")]

    env = cascade_envs.make("cascade/MCQA-v0")
    # the rows NeMo Gym's MCQA server grades too (it knows fewer grading modes), answered \boxed{X}
    items = [
        i for i in env.tasks if i.row.get("grading_mode") in ("strict_single_letter_boxed", "lenient_boxed")
    ]
    texts = [f"<think>easy</think>\\boxed{{{item.row['expected_answer']}}}" for item in items]
    ours_bodies, gym_bodies = [], []
    for item, text in zip(items, texts, strict=True):
        row = gym_row(env, "cascade/MCQA-v0", item)
        ours_bodies.append((row, {**row, "response": answer(text)}))
        gym_bodies.append((item.row, {**item.row, "response": answer(text)}))

    ours_port, gym_port = free_port(), free_port()
    ours = subprocess.Popen(
        [sys.executable, "-m", "cascade_envs", "serve", "--protocol", "nemo-gym", "cascade/MCQA-v0",
         "--port", str(ours_port), "--max-sessions", "1024"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    gym = subprocess.Popen([sys.executable, "-c", GYM_MCQA, str(gym_port)], stdout=subprocess.DEVNULL)
    ours_url, gym_url = f"http://127.0.0.1:{ours_port}", f"http://127.0.0.1:{gym_port}"
    try:
        wait_up(ours_url, ours)
        wait_up(gym_url, gym)
        # the same rows score the same on both (a check, not a measurement)
        for (seed, verify), (gseed, gverify) in zip(ours_bodies, gym_bodies, strict=True):
            with httpx.Client() as a, httpx.Client() as b:
                a.post(ours_url + "/seed_session", json=seed)
                b.post(gym_url + "/seed_session", json=gseed)
                ra = a.post(ours_url + "/verify", json=verify).json()["reward"]
                rb = b.post(gym_url + "/verify", json=gverify).json()["reward"]
                assert ra == rb == 1.0, (ra, rb)
        print(f"cascade/MCQA-v0, {len(items)} rows; {args.episodes} episodes per cell; episodes/s")
        print(f"{'sessions':>8}  {'direct':>9}  {'ours':>9}  {'NeMo Gym':>9}  {'ours/NeMo Gym':>13}")
        for sessions in levels:
            d = asyncio.run(direct(env, items, texts, sessions, args.episodes))
            o = asyncio.run(load(ours_url, ours_bodies, sessions, args.episodes))
            g = asyncio.run(load(gym_url, gym_bodies, sessions, args.episodes))
            print(f"{sessions:>8}  {d:>9.0f}  {o:>9.0f}  {g:>9.0f}  {o / g:>12.2f}x", flush=True)
    finally:
        for proc in (ours, gym):
            proc.terminate()
            proc.wait(30)
        env.close()
    print(json.dumps({"note": "one load generator on this machine; servers one process each"}))


if __name__ == "__main__":
    main()
