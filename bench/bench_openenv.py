"""Episodes/s of a cascade env served over OpenEnv, next to OpenEnv's own server and the env called directly.

Three ways to play the same single-turn episodes (reset to a task, one reply, the reward):

1. **direct**: ``env.astart`` / ``aadvance`` / ``ascore_episodes`` / ``aend`` in this process, N at a time;
2. **cascade**: ``cascade-envs serve --protocol openenv ENV`` (our h11 + wsproto server and session
   store) in its own process, played by N of OpenEnv's ``GenericEnvClient`` connections at once;
3. **openenv**: OpenEnv's own server (``openenv.core.env_server.create_app`` on uvicorn) in its own
   process, wrapping the same env in an OpenEnv ``Environment``, played by the same clients.

Printed: episodes/s at each concurrency and the median episode latency; the servers' columns
include the client's own cost (the same for both). Needs the ``[openenv]`` extra.

    python bench/bench_openenv.py [--env cascade/MCQA-v0] [--concurrency 1,8,64] [--episodes 512] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx

import cascade_envs

REPLY = "<think>It is the second.</think>\\boxed{B}"


# ----- OpenEnv's own server around the same env (run in its own process: ``--openenv-server PORT``) --


def run_openenv_server(env_id: str, port: int, max_sessions: int) -> None:
    import uvicorn
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment

    from cascade_envs.integrations.openenv import wire
    from cascade_envs.integrations.openenv.client import CascadeAction, CascadeObservation, CascadeState

    env = cascade_envs.make(env_id)
    tasks = env.tasks
    assert tasks

    class Wrapped(Environment):  # type: ignore[misc]  # openenv is untyped
        """Our env as an OpenEnv ``Environment`` (one per session, the cascade env shared)."""

        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self.episode: Any = None
            self._state = CascadeState()

        async def reset_async(
            self, seed: int | None = None, episode_id: str | None = None, index: int = 0
        ) -> CascadeObservation:
            self.episode = await env.astart(tasks[index % len(tasks)])
            self._state = CascadeState(episode_id=episode_id, task_id=self.episode.task_id)
            return CascadeObservation(messages=list(self.episode.messages), task_id=self.episode.task_id)

        async def step_async(
            self, action: CascadeAction, timeout_s: float | None = None
        ) -> CascadeObservation:
            turn = await env.aadvance(self.episode, action.message)
            reward = None
            if self.episode.done:
                reward = (await env.ascore_episodes([self.episode]))[0]
                await env.aend(self.episode)
            self._state.step_count += 1
            return CascadeObservation(
                messages=turn.observation,
                task_id=self.episode.task_id,
                turn=self.episode.turns,
                done=self.episode.done,
                reward=wire.reward_value(reward),
                reward_info=reward.to_dict() if reward else None,
            )

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any) -> Any:
            raise NotImplementedError("async only")

        def step(self, action: Any, timeout_s: float | None = None, **kw: Any) -> Any:
            raise NotImplementedError("async only")

        @property
        def state(self) -> CascadeState:
            return self._state

    app = create_app(
        Wrapped, CascadeAction, CascadeObservation, env_name=env_id, max_concurrent_envs=max_sessions
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws_max_size=8 << 20)


# ----- the clients --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(command: list[str], url: str, stderr: int | None = None) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{command} did not answer on {url}")


async def play_server(url: str, concurrency: int, episodes: int, n_tasks: int) -> tuple[float, float]:
    """(episodes/s, median episode seconds) of ``concurrency`` connections sharing ``episodes``."""
    from openenv.core.generic_client import GenericEnvClient

    clients = [GenericEnvClient(base_url=url) for _ in range(concurrency)]
    await asyncio.gather(*(c.connect() for c in clients))
    left = episodes
    latencies: list[float] = []

    async def worker(client: Any) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            await client.reset(index=left % n_tasks)
            result = await client.step({"message": REPLY})
            assert result.done and result.observation["reward_info"] is not None
            latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in clients))
    elapsed = time.perf_counter() - t0
    await asyncio.gather(*(c.close() for c in clients))
    return episodes / elapsed, statistics.median(latencies)


async def play_direct(env: Any, concurrency: int, episodes: int) -> tuple[float, float]:
    left = episodes
    latencies: list[float] = []

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            episode = await env.astart(env.tasks[left % len(env.tasks)])
            await env.aadvance(episode, REPLY)
            await env.ascore_episodes([episode])
            await env.aend(episode)
            latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return episodes / (time.perf_counter() - t0), statistics.median(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="cascade/MCQA-v0")
    parser.add_argument("--concurrency", default="1,8,64")
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--openenv-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    if args.openenv_server:
        run_openenv_server(args.env, args.openenv_server, max(levels))
        return

    env = cascade_envs.make(args.env)
    rows: dict[str, dict[int, list[tuple[float, float]]]] = {"direct": {}, "cascade": {}, "openenv": {}}
    for n in levels:
        rows["direct"][n] = [asyncio.run(play_direct(env, n, args.episodes)) for _ in range(args.rounds)]
    n_tasks = len(env.tasks or [])
    env.close()
    servers = {
        "cascade": lambda port: [sys.executable, "-m", "cascade_envs", "serve", "--protocol", "openenv", args.env,
                                 "--port", str(port), "--max-sessions", str(max(levels))],
        "openenv": lambda port: [sys.executable, __file__, "--env", args.env, "--openenv-server", str(port),
                                 "--concurrency", args.concurrency],
    }  # fmt: skip
    urls: dict[str, str] = {}
    processes = []
    try:
        for name, command in servers.items():
            port = free_port()
            urls[name] = f"http://127.0.0.1:{port}"
            # OpenEnv's server logs a traceback for every client that closes its socket: kept quiet
            quiet = subprocess.DEVNULL if name == "openenv" else None
            processes.append(start(command(port), urls[name], stderr=quiet))
            asyncio.run(play_server(urls[name], 1, 16, n_tasks))  # warm up
        for n in levels:
            for _ in range(args.rounds):  # alternating rounds, so both see the same machine load
                for name, url in urls.items():
                    rows[name].setdefault(n, []).append(
                        asyncio.run(play_server(url, n, args.episodes, n_tasks))
                    )
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)

    print(
        f"{args.env}: {args.episodes} single-turn episodes per cell, median of {args.rounds} alternating "
        "rounds; episodes/s (median episode ms)"
    )
    print(f"{'':>8}" + "".join(f"{f'{n} sessions':>22}" for n in levels))
    for name, cells in rows.items():
        line = ""
        for n in levels:
            rate = statistics.median(r for r, _ in cells[n])
            latency = statistics.median(ms for _, ms in cells[n]) * 1000
            line += f"{rate:>12.0f} ({latency:6.2f} ms)"
        print(f"{name:>8}" + line)


if __name__ == "__main__":
    main()
