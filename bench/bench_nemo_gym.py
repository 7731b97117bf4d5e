"""Our resources server against NeMo Gym's own, under NeMo Gym 0.7's rollout collection: one run, one table.

The same single-turn episodes (the ``cascade/MCQA-v0`` rows NeMo Gym's ``mcqa`` resources server
grades too, each answered right: every episode must score 1.0 on both) are collected by NeMo Gym's
own rollout collection (``RolloutCollectionHelper.preprocess_examples`` + ``run_examples``, C rollouts
in flight) through NeMo Gym's stack: its head server, its ``vllm_model`` against a scripted
chat-completions server that answers every question right at once (so the model is not the
bottleneck), and ``simple_agent`` behind each of 0.7's environment servers for it: ``legacy_agent``
(the relay NeMo Gym's own ``mcqa`` config uses: the agent's ``/run`` seeds, asks the model and
verifies) and ``single_agent_turn_legacy`` (typed seed, agent session, verify, ``/close_session``).
The resources servers: ``cascade-envs serve --protocol nemo-gym cascade/MCQA-v0`` and NeMo Gym's
``MCQAResourcesServer`` (the reference) on uvicorn, one process each; the stack and the model run
in this process (``tests/integrations/nemo_gym_stack.py``), the same for both.

    bash .ci/nemo_gym.sh   # once: builds .venv-nemo-gym with nemo-gym 0.7
    .venv-nemo-gym/bin/python bench/bench_nemo_gym.py [--episodes 200] [--concurrency 1,16,64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TQDM_DISABLE", "1")  # NeMo Gym's progress bars, one per cell

import cascade_envs  # noqa: E402
from cascade_envs.integrations.nemo_gym.launch import ServerProcess, nemo_gym_server  # noqa: E402
from tests.chat_server import ScriptedChatServer, Step  # noqa: E402
from tests.integrations.nemo_gym_stack import GymStack, agent_name  # noqa: E402

ENV_ID = "cascade/MCQA-v0"
MODES = ("strict_single_letter_boxed", "lenient_boxed")  # the grading modes NeMo Gym's MCQA server knows
SERVERS = {"cascade": "serve --protocol nemo-gym", "mcqa": "NeMo Gym's mcqa server (reference)"}
PATHS = {"relay": "legacy_agent -> simple_agent /run", "simple": "single_agent_turn_legacy -> simple_agent"}


def rate(stack: GymStack, rows: list[dict[str, Any]], agent: str, episodes: int, concurrency: int) -> float:
    """Episodes/s of NeMo Gym's rollout collection of ``episodes`` rows through ``agent``, ``concurrency``
    in flight (preprocessing outside the clock); every reward must be 1.0."""
    from nemo_gym.rollout_collection import RolloutCollectionHelper

    helper = RolloutCollectionHelper()
    chosen = [{**rows[i % len(rows)], "task_source": agent} for i in range(episodes)]
    with contextlib.redirect_stdout(io.StringIO()):  # its notes on repeats, not this table's
        examples = helper.preprocess_examples(chosen)

    async def run() -> tuple[float, list[dict[str, Any]]]:
        t0 = time.perf_counter()
        futures = helper.run_examples(examples, stack.head_config, semaphore=asyncio.Semaphore(concurrency))
        results = [(await f)[1] for f in futures]
        return time.perf_counter() - t0, results

    elapsed, results = asyncio.run_coroutine_threadsafe(run(), stack.loop).result(600)
    bad = [r.get("reward", r) for r in results if r.get("reward") != 1.0 or r.get("mask_sample")]
    if bad:
        raise RuntimeError(f"{agent}: {len(bad)} episodes not scored 1.0, e.g. {str(bad[0])[:300]}")
    return episodes / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200, help="episodes a cell (default 200)")
    parser.add_argument("--concurrency", default="1,16,64", help="rollouts in flight (default 1,16,64)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds, median kept (default 3)")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]

    env = cascade_envs.make(ENV_ID)
    rows = [{**i.row, "cascade_row": i.row} for i in env.tasks or [] if i.row.get("grading_mode") in MODES]
    env.close()
    answers = {
        r["responses_create_params"]["input"][-1][
            "content"
        ]: f"<think>easy</think>\\boxed{{{r['expected_answer']}}}"
        for r in rows
    }

    def policy(request: dict[str, Any]) -> Step:
        return Step(answers[request["messages"][-1]["content"]])

    ours = [sys.executable, "-m", "cascade_envs", "serve", "--protocol", "nemo-gym", ENV_ID]
    ours += ["--port", "{port}", "--max-sessions", str(4 * max(levels))]
    processes: list[ServerProcess] = []
    load0 = os.getloadavg()[0]
    try:
        processes.append(ServerProcess(ours))
        argv, gym_env = nemo_gym_server(sys.executable, "mcqa")  # NeMo Gym's own server
        processes.append(ServerProcess(argv, env=gym_env))
        urls = {"cascade": processes[0].url, "mcqa": processes[1].url}
        with ScriptedChatServer(policy) as chat:
            stack = GymStack(urls, chat.url + "/v1")
            try:
                cells = [(p, s) for p in PATHS for s in SERVERS]
                for path, server in cells:  # warm-up: every row once through every path
                    rate(stack, rows, agent_name(server, path), len(rows), 8)
                results: dict[tuple[str, str], list[list[float]]] = {c: [[] for _ in levels] for c in cells}
                for _ in range(args.rounds):  # alternating rounds: every cell sees the same machine load
                    for k, n in enumerate(levels):
                        for path, server in cells:
                            cell = results[(path, server)][k]
                            cell.append(rate(stack, rows, agent_name(server, path), args.episodes, n))
            finally:
                stack.close()
    finally:
        for process in processes:
            process.stop()
    title = (
        f"{ENV_ID} under NeMo Gym {version('nemo-gym')}'s rollout collection: {len(rows)} rows, "
        f"{args.episodes} single-turn episodes a cell, median of {args.rounds} alternating rounds; "
        f"load average {load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    report(results, title, levels)


def report(results: dict[tuple[str, str], list[list[float]]], title: str, levels: list[int]) -> None:
    rates = {cell: [statistics.median(c) for c in cells] for cell, cells in results.items()}
    print(title)
    head = "".join(f"{f'C={n}':>8}" for n in levels)
    print(f"{'episodes/s at C rollouts in flight':60}{head}  {'ms/ep C=1':>10}")
    for path, route in PATHS.items():
        print(f"{route}:")
        for server, label in SERVERS.items():
            r = rates[(path, server)]
            print(f"  {label:58}{''.join(f'{x:8.1f}' for x in r)}  {1e3 / r[0]:10.2f}")
        ratio = [a / b for a, b in zip(rates[(path, "cascade")], rates[(path, "mcqa")], strict=True)]
        print(f"  {'ours / reference':58}{''.join(f'{x:7.2f}x' for x in ratio)}")
    print(
        "Each episode: NeMo Gym's environment server, agent and vllm_model (one event loop in this process) "
        "and a scripted chat model, the same for both rows; only the resources server differs."
    )


if __name__ == "__main__":
    main()
