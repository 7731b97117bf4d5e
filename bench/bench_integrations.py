"""Each integration's cost per episode against calling the env directly: one run, one table.

The same single-turn episodes (the ``cascade/MCQA-v0`` rows NeMo Gym's MCQA server grades too, each
answered right: every episode must score 1.0) are played by N sessions at once (1, 8, 64): the env
called directly (``astart``/``aadvance``/``ascore_episodes``/``aend``); ``serve --protocol nemo-gym``
(``/seed_session`` + ``/verify`` per episode, as NeMo Gym's ``simple_agent``, over aiohttp as its
clients) and NeMo Gym's own MCQA resources server on the same rows (the reference for both
protocols; run by ``.venv-nemo-gym``'s Python, built by ``bash .ci/nemo_gym.sh``); ``serve
--protocol openenv`` and OpenEnv's own server (``create_app`` on uvicorn) around the same env, both
played by OpenEnv's ``GenericEnvClient`` (reset + one step); TRL's reward function
(``cascade_envs.integrations.trl``) and, where verl imports, verl's ``AgentLoopWorker`` running the
``cascade`` loop, on batches of N (groups of up to 8 completions of a prompt). Servers run one
process each; the load generator is this process. An absent package prints what measures it instead
(verl's pins keep it out of the main venv: run this script with ``.venv-verl/bin/python`` for its row).

    pip install -e '.[trl,openenv]' aiohttp && bash .ci/nemo_gym.sh   # once
    python bench/bench_integrations.py [--episodes 200] [--sessions 1,8,64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import cascade_envs
from cascade_envs.integrations.nemo_gym.launch import ServerProcess, nemo_gym_server

ENV_ID = "cascade/MCQA-v0"
ROOT = Path(__file__).resolve().parents[1]
Play = Callable[[int], Awaitable[None]]  # plays episode i of the rows
Session = Callable[[], AbstractAsyncContextManager[Play]]  # one client session (connection, cookies)


def run_openenv_server(port: int, max_sessions: int) -> None:
    """OpenEnv's own server around our env (``--serve-openenv PORT``, a process of its own)."""
    import uvicorn
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment

    from cascade_envs.integrations.openenv import wire
    from cascade_envs.integrations.openenv.client import CascadeAction, CascadeObservation, CascadeState

    env = cascade_envs.make(ENV_ID)
    tasks = env.tasks or []

    class Wrapped(Environment):  # one per session, the cascade env shared
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self.episode: Any = None
            self._state = CascadeState()

        async def reset_async(
            self, seed: int | None = None, episode_id: str | None = None, index: int = 0
        ) -> Any:
            self.episode = await env.astart(tasks[index % len(tasks)])
            self._state = CascadeState(episode_id=episode_id, task_id=self.episode.task_id)
            return CascadeObservation(messages=list(self.episode.messages), task_id=self.episode.task_id)

        async def step_async(self, action: CascadeAction, timeout_s: float | None = None) -> Any:
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

        def reset(self, *args: Any, **kw: Any) -> Any:  # the server calls the async ones
            raise NotImplementedError

        step = reset

        @property
        def state(self) -> CascadeState:
            return self._state

    app = create_app(
        Wrapped, CascadeAction, CascadeObservation, env_name=ENV_ID, max_concurrent_envs=max_sessions
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws_max_size=8 << 20)


# ----- the load generator and each protocol's client session --------------------------------------


def check(reward: Any, where: str) -> None:
    if reward != 1.0:
        raise RuntimeError(f"{where}: a right answer scored {reward!r}")


async def rate(session: Session, sessions: int, episodes: int) -> float:
    """Episodes/s of ``sessions`` client sessions sharing ``episodes`` (sessions opened untimed)."""
    async with AsyncExitStack() as stack:
        plays = [await stack.enter_async_context(session()) for _ in range(sessions)]
        left = episodes

        async def worker(play: Play) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await play(left)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(p) for p in plays))
        return episodes / (time.perf_counter() - t0)


def direct_session(env: Any, items: list[Any], texts: list[str]) -> Session:
    @asynccontextmanager
    async def session() -> AsyncIterator[Play]:
        async def play(i: int) -> None:
            episode = await env.astart(items[i % len(items)])
            await env.aadvance(episode, texts[i % len(items)])
            check((await env.ascore_episodes([episode]))[0].value, "direct")
            await env.aend(episode)

        yield play

    return session


def nemo_gym_session(url: str, bodies: list[tuple[dict[str, Any], dict[str, Any]]]) -> Session:
    @asynccontextmanager
    async def session() -> AsyncIterator[Play]:
        import aiohttp

        jar = aiohttp.DummyCookieJar()  # cookies passed by hand, as NeMo Gym's agents do
        async with aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(limit=1), cookie_jar=jar) as c:

            async def play(i: int) -> None:
                seed, verify = bodies[i % len(bodies)]
                async with c.post("/seed_session", json=seed) as r1:
                    await r1.read()
                    pairs = (h.split(";", 1)[0].partition("=") for h in r1.headers.getall("set-cookie", []))
                    cookies = {name.strip(): value for name, _, value in pairs}
                async with c.post("/verify", json=verify, cookies=cookies) as r2:
                    check((await r2.json()).get("reward") if r2.status == 200 else r2.status, url)

            yield play

    return session


def openenv_session(url: str, indexes: list[int], texts: list[str]) -> Session:
    @asynccontextmanager
    async def session() -> AsyncIterator[Play]:
        from openenv.core.generic_client import GenericEnvClient

        async with GenericEnvClient(base_url=url) as client:

            async def play(i: int) -> None:
                await client.reset(index=indexes[i % len(indexes)])
                result = await client.step({"message": texts[i % len(texts)]})
                check(result.reward if result.done else "not done", url)

            yield play

    return session


def trl_rate(spec: Any, indexes: list[int], texts: list[str], batch: int, episodes: int) -> float:
    """Completions/s of the TRL reward function on batches of ``batch`` (groups of up to 8 per task)."""
    from cascade_envs.integrations.trl import ENV_COLUMN, INDEX_COLUMN

    group, calls = min(batch, 8), math.ceil(episodes / batch)
    t0 = time.perf_counter()
    for call in range(calls):
        tasks = [(call * batch + j) // group % len(indexes) for j in range(batch)]
        rewards = spec.reward(
            prompts=[[]] * batch,
            completions=[[{"role": "assistant", "content": texts[k]}] for k in tasks],
            completion_ids=[[0]] * batch,  # ends with an end token (spec.end_ids below): not cut
            **{ENV_COLUMN: [ENV_ID] * batch, INDEX_COLUMN: [indexes[k] for k in tasks]},
        )
        for reward in rewards:
            check(reward, "TRL reward function")
    return calls * batch / (time.perf_counter() - t0)


def verl_rater() -> Callable[[int, int], float]:
    """Episodes/s of verl's ``AgentLoopWorker`` running the ``cascade`` loop on batches (bench_verl's rig)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import json

    import transformers
    from bench_verl import via_verl

    from cascade_envs.integrations.verl.export import verl_rows
    from cascade_envs.policies.embedded import embedded_model_path

    tok = transformers.AutoTokenizer.from_pretrained(str(embedded_model_path()), local_files_only=True)
    row = verl_rows(ENV_ID, limit=1)[0]
    turns = [f"<think>easy</think>\\boxed{{{json.loads(row['extra_info']['task_json'])['expected_answer']}}}"]
    return lambda batch, episodes: 1 / via_verl(tok, ENV_ID, row, turns, batch, max(1, episodes // batch))


# ----- servers --------------------------------------------------------------------------------------


def response(text: str) -> dict[str, Any]:
    """A whole Responses API object holding one assistant message (NeMo Gym validates it)."""
    content = [{"type": "output_text", "text": text, "annotations": []}]
    message = {"id": "m", "type": "message", "role": "assistant", "status": "completed", "content": content}
    return {"id": "r", "object": "response", "created_at": 0.0, "model": "bench", "output": [message],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}  # fmt: skip


def has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200, help="episodes a cell (default 200)")
    parser.add_argument("--sessions", default="1,8,64", help="concurrent sessions / batch sizes")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds, median kept (default 3)")
    default_gym = ROOT / ".venv-nemo-gym" / "bin" / "python"
    parser.add_argument("--nemo-gym-python", default=str(default_gym), help="a Python with nemo-gym")
    parser.add_argument("--serve-openenv", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    levels = [int(x) for x in args.sessions.split(",")]
    if args.serve_openenv:
        return run_openenv_server(args.serve_openenv, 2 * max(levels))

    env = cascade_envs.make(ENV_ID)
    tasks = env.tasks or []
    modes = ("strict_single_letter_boxed", "lenient_boxed")  # the modes NeMo Gym's MCQA server knows
    indexes = [n for n, item in enumerate(tasks) if item.row.get("grading_mode") in modes]
    items = [tasks[n] for n in indexes]
    texts = [f"<think>easy</think>\\boxed{{{item.row['expected_answer']}}}" for item in items]
    load0 = os.getloadavg()[0]

    def sessions(session: Session) -> Callable[[int, int], float]:
        return lambda n, episodes: asyncio.run(rate(session, n, episodes))

    raters = {"direct": sessions(direct_session(env, items, texts))}  # row -> rate(N, episodes)
    absent: dict[str, str] = {}
    servers: list[ServerProcess] = []
    spec = None
    ours = [sys.executable, "-m", "cascade_envs", "serve", ENV_ID, "--max-sessions", str(4 * max(levels))]
    try:
        if has("aiohttp"):
            from cascade_envs.integrations.nemo_gym.export import gym_row

            servers.append(ServerProcess([*ours, "--protocol", "nemo-gym", "--port", "{port}"]))
            url = servers[-1].url
            rows = [gym_row(env, ENV_ID, item) for item in items]
            bodies = [(r, {**r, "response": response(t)}) for r, t in zip(rows, texts, strict=True)]
            raters["nemo-gym"] = sessions(nemo_gym_session(url, bodies))
            gym = args.nemo_gym_python
            if (
                Path(gym).exists()
                and subprocess.run(
                    [gym, "-c", "import resources_servers.mcqa.app"], capture_output=True
                ).returncode
                == 0
            ):
                argv, gym_env = nemo_gym_server(gym, "mcqa")
                servers.append(ServerProcess(argv, env=gym_env))  # NeMo Gym's own server
                url = servers[-1].url
                bodies = [
                    (i.row, {**i.row, "response": response(t)}) for i, t in zip(items, texts, strict=True)
                ]
                raters["NeMo Gym"] = sessions(nemo_gym_session(url, bodies))
            else:
                absent["NeMo Gym"] = f"no nemo-gym at {gym}: `bash .ci/nemo_gym.sh` builds it"
        else:
            absent["nemo-gym"] = "needs aiohttp (NeMo Gym's HTTP client): `pip install aiohttp`"
        if has("openenv", "wsproto"):
            servers.append(ServerProcess([*ours, "--protocol", "openenv", "--port", "{port}"]))
            url = servers[-1].url
            raters["openenv"] = sessions(openenv_session(url, indexes, texts))
            own = [sys.executable, __file__, "--sessions", args.sessions, "--serve-openenv"]
            servers.append(ServerProcess([*own, "{port}"]))
            url = servers[-1].url
            raters["OpenEnv"] = sessions(openenv_session(url, indexes, texts))
        else:
            absent["openenv"] = "`pip install 'cascade-envs[openenv]'` (openenv-core, wsproto)"
        if has("trl", "datasets"):
            from cascade_envs.integrations.trl import CascadeSpec

            spec = CascadeSpec(ENV_ID)
            spec.end_ids = {0}  # what its callback reads from the tokenizer when training begins
            raters["TRL"] = lambda n, episodes: trl_rate(spec, indexes, texts, n, episodes)
        else:
            absent["TRL"] = "`pip install 'cascade-envs[trl]'`"
        if has("verl"):
            raters["verl"] = verl_rater()
        else:
            absent["verl"] = (
                "verl pins transformers<5.11: run this (or bench_verl.py) with .venv-verl/bin/python"
            )

        for rater in raters.values():  # warm-up: every row once, every server up to speed
            rater(1, 2 * len(items))
        results: dict[str, list[list[float]]] = {name: [[] for _ in levels] for name in raters}
        for _ in range(args.rounds):  # alternating rounds: every row sees the same machine load
            for name, rater in raters.items():
                for k, n in enumerate(levels):
                    results[name][k].append(rater(n, args.episodes))
    finally:
        for server in servers:
            server.stop()
        if spec is not None:
            spec.close()
        env.close()
    title = (
        f"{ENV_ID}: {len(items)} rows, {args.episodes} single-turn episodes a cell, median of {args.rounds} "
        f"alternating rounds; load average {load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    report(results, absent, title, levels)


LABELS = {
    "direct": ("env called directly", ""),
    "nemo-gym": ("nemo-gym: serve --protocol nemo-gym", "NeMo Gym"),
    "NeMo Gym": ("NeMo Gym MCQA server (reference)", ""),
    "openenv": ("openenv: serve --protocol openenv", "OpenEnv,NeMo Gym"),
    "OpenEnv": ("OpenEnv 0.3 create_app (reference)", "NeMo Gym"),
    "TRL": ("TRL reward function (batch of N)", ""),
    "verl": ("verl cascade agent loop (batch of N)", ""),
}


def report(
    results: dict[str, list[list[float]]], absent: dict[str, str], title: str, levels: list[int]
) -> None:
    rates = {name: [statistics.median(c) for c in cells] for name, cells in results.items()}
    per_direct = 1e3 / rates["direct"][0]
    print(title)
    head = "".join(f"{f'N={n}':>8}" for n in levels)
    print(
        f"{'episodes/s at N sessions':38}{head}  {'ms/ep N=1':>10}  {'overhead':>9}  {'x direct':>8}  ratios (N=...)"
    )
    for name, (label, refs) in LABELS.items():
        if name in absent:
            print(f"{label:38}not measured here: {absent[name]}")
            continue
        if name not in rates:
            continue
        r = rates[name]
        ms = 1e3 / r[0]
        ratios = "; ".join(
            f"{'/'.join(f'{a / b:.2f}' for a, b in zip(r, rates[ref], strict=True))}x {ref}"
            for ref in refs.split(",")
            if ref in rates
        )
        cells = "".join(f"{x:8.0f}" for x in r)
        print(f"{label:38}{cells}  {ms:10.3f}  {ms - per_direct:+8.3f}  {ms / per_direct:7.1f}x  {ratios}")
    print(
        "ms/ep N=1: one episode alone (latency); overhead: that minus the env called directly. Servers: one "
        "process each, the load generator (aiohttp / OpenEnv's client, whose cost is in every server row) "
        "here. TRL, verl: N completions per call (groups of up to 8 per prompt)."
    )


if __name__ == "__main__":
    main()
