"""Judge-call throughput of ``HTTPJudge`` and the cost GenRM aggregation adds per group.

1. Throughput: a local chat-completions server (the ``serve-judge`` HTTP layer over a policy that
   answers after a fixed ``--latency``, in its own process) is called at several concurrency
   limits by ``HTTPJudge`` and by the reference, a plain ``httpx.AsyncClient`` loop under an
   ``asyncio.Semaphore``. With the model's time fixed, the numbers are client overhead plus
   concurrency. Printed: requests/s (median of alternating rounds) and p50/p99 latency of both,
   and the ratio.
2. GenRM: one group of ``--group`` answers scored by ``GenRMEnv`` (all pairs: G(G-1)/2 judge calls)
   against the same server, next to the same judge calls made bare; and the CPU work GenRM adds
   per group (prompts, verdict parsing, aggregation) timed alone.
3. ``--embedded``: the same throughput table against ``cascade-envs serve-judge`` on the embedded
   model (``--embedded-tokens`` per reply), to show what batching concurrent requests buys.

    python bench/bench_judge.py [--latency 0.02] [--concurrency 1,4,16,64] [--group 16] [--embedded]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from cascade_envs.core import Completion, Message
from cascade_envs.judges import HTTPJudge
from cascade_envs.policy import SamplingParams

VERDICT = '{"score_1": 4, "score_2": 3, "ranking": 2}'
"""What the latency server answers: a verdict GenRM parses."""
ASK: list[Message] = [{"role": "user", "content": "Which response is better? Reply with a JSON verdict."}]


# ----- the server side (run in its own process: ``--serve LATENCY``) ------------------------------


class LatencyPolicy:
    """A policy whose every reply takes ``latency_s``: a stand-in for a model with fixed speed."""

    def __init__(self, latency_s: float):
        self.latency_s = latency_s

    async def agenerate(
        self, messages: list[Message], *, sampling: SamplingParams, thinking: bool = True
    ) -> Completion:
        await asyncio.sleep(self.latency_s)
        return Completion(VERDICT, finish_reason="stop", token_ids=[1] * 12, prompt_token_ids=[1] * 40)

    async def aclose(self) -> None:
        pass


def serve(latency_s: float) -> None:
    from cascade_envs.judges.server import ChatService, start_server

    async def main() -> None:
        service = ChatService(LatencyPolicy(latency_s), "bench", max_queue=100_000)
        server = await start_server(service, "127.0.0.1", 0)
        print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def start(command: list[str], marker: str, timeout_s: float = 300) -> tuple[subprocess.Popen, str]:
    """Start a server process and wait for the line that starts with ``marker``; its URL."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if marker in line:
            return proc, "http" + line.split("http", 1)[1].split()[0]
    proc.kill()
    raise SystemExit(f"the server did not start: {' '.join(command)}")


# ----- clients ------------------------------------------------------------------------------------


Call = Callable[[], Awaitable[str]]


async def measure(call: Call, requests: int, concurrency: int) -> tuple[float, list[float]]:
    """``(requests/s, latencies)`` of ``requests`` calls with at most ``concurrency`` in flight."""
    latencies: list[float] = []
    slots = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with slots:
            start = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(requests)))
    return requests / (time.perf_counter() - start), latencies


async def ours(
    url: str, model: str, concurrency: int, requests: int, max_tokens: int
) -> tuple[float, list[float]]:
    judge = HTTPJudge(url, model=model, concurrency=concurrency, timeout_s=600)
    try:
        await judge.acomplete(ASK, max_tokens=max_tokens)  # warm the connection pool
        return await measure(lambda: judge.acomplete(ASK, max_tokens=max_tokens), requests, concurrency)
    finally:
        await judge.aclose()


async def reference(
    url: str, model: str, concurrency: int, requests: int, max_tokens: int
) -> tuple[float, list[float]]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    body = {"model": model, "messages": ASK, "max_tokens": max_tokens, "temperature": 0.0, "top_p": 1.0}
    async with httpx.AsyncClient(limits=limits, timeout=600) as client:

        async def call() -> str:
            response = await client.post(f"{url}/chat/completions", json=body)
            response.raise_for_status()
            return str(response.json()["choices"][0]["message"]["content"])

        await call()
        return await measure(call, requests, concurrency)


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def throughput_table(
    url: str, model: str, levels: list[int], requests_for: Callable[[int], int], max_tokens: int, rounds: int
) -> None:
    """Per level, ``rounds`` alternating runs of ours and the reference: median rate, pooled latencies."""
    print(
        f"{'concurrency':>11} {'requests':>8} | {'HTTPJudge req/s':>15} {'p50 ms':>7} {'p99 ms':>7} | "
        f"{'httpx ref req/s':>15} {'p50 ms':>7} {'p99 ms':>7} | {'ours/ref':>8}"
    )
    for level in levels:
        n = requests_for(level)
        results: dict[str, tuple[list[float], list[float]]] = {"ours": ([], []), "ref": ([], [])}
        for _ in range(rounds):
            for name, client in (("ours", ours), ("ref", reference)):
                rate, latencies = asyncio.run(client(url, model, level, n, max_tokens))
                results[name][0].append(rate)
                results[name][1].extend(latencies)
        (rates, lat), (ref_rates, ref_lat) = results["ours"], results["ref"]
        rate, ref_rate = statistics.median(rates), statistics.median(ref_rates)
        print(
            f"{level:>11} {n:>8} | {rate:>15.1f} {percentile(lat, 50) * 1e3:>7.1f} {percentile(lat, 99) * 1e3:>7.1f} | "
            f"{ref_rate:>15.1f} {percentile(ref_lat, 50) * 1e3:>7.1f} {percentile(ref_lat, 99) * 1e3:>7.1f} | "
            f"{rate / ref_rate:>8.2f}"
        )


# ----- GenRM --------------------------------------------------------------------------------------


def genrm_section(url: str, group: int, concurrency: int, repeats: int) -> None:
    from cascade_envs.envs.genrm.aggregate import Coefficients, Outcome, aggregate_group, comparison_plan
    from cascade_envs.envs.genrm.env import GenRMEnv
    from cascade_envs.envs.genrm.prompt import comparison_messages, parse_verdict

    task = {"id": "bench", "prompt": "Explain why the sky is blue in two sentences."}
    answers = [
        f"<think>{'reasoning ' * (5 + i)}</think>Rayleigh scattering, answer {i}: " + "blue " * (10 + 3 * i)
        for i in range(group)
    ]
    plan = comparison_plan("all_pairs", group)

    async def scored_group() -> float:
        env = GenRMEnv(tasks=[task], judge_url=url, judge_model="bench", judge_concurrency=concurrency)
        try:
            await env.ascore_responses(task, answers[:2])  # warm the connection pool
            start = time.perf_counter()
            rewards = await env.ascore_responses(task, answers)
            elapsed = time.perf_counter() - start
        finally:
            await env.aclose()
        assert not any(r.masked for r in rewards), [r.error for r in rewards if r.masked]
        return elapsed

    async def bare_calls() -> float:
        judge = HTTPJudge(url, model="bench", concurrency=concurrency, timeout_s=600)
        messages = [
            comparison_messages([{"role": "user", "content": task["prompt"]}], answers[i], answers[j])[0]
            for i, j in plan
        ]
        try:
            await judge.acomplete(ASK)
            start = time.perf_counter()
            await asyncio.gather(*(judge.acomplete(m) for m in messages))
            return time.perf_counter() - start
        finally:
            await judge.aclose()

    timings: list[tuple[float, float]] = [
        (asyncio.run(scored_group()), asyncio.run(bare_calls())) for _ in range(repeats)
    ]
    group_s = statistics.median(t[0] for t in timings)
    calls_s = statistics.median(t[1] for t in timings)
    added_s = statistics.median(t[0] - t[1] for t in timings)  # paired: both runs of a pair share the load

    conversation = [{"role": "user", "content": task["prompt"]}]
    lengths = {i: len(a) for i, a in enumerate(answers)}

    def cpu_work() -> None:
        outcomes = []
        for i, j in plan:
            _, quote = comparison_messages(conversation, answers[i], answers[j])
            outcomes.append(Outcome(i, j, verdict=parse_verdict(VERDICT, quote)))
        aggregate_group(outcomes, list(range(group)), lengths, lengths, Coefficients())

    def aggregate_only(outcomes: list[Outcome]) -> None:
        aggregate_group(outcomes, list(range(group)), lengths, lengths, Coefficients())

    loops = 200
    start = time.perf_counter()
    for _ in range(loops):
        cpu_work()
    cpu_s = (time.perf_counter() - start) / loops
    outcomes = [Outcome(i, j, verdict=parse_verdict(VERDICT)) for i, j in plan]
    start = time.perf_counter()
    for _ in range(loops):
        aggregate_only(outcomes)
    agg_s = (time.perf_counter() - start) / loops

    print(
        f"\nGenRM, one group of {group} answers, all pairs = {len(plan)} judge calls, concurrency {concurrency} "
        f"(median of {repeats}):"
    )
    print(f"  GenRMEnv.ascore_responses (judge calls + GenRM)   {group_s * 1e3:8.1f} ms")
    print(f"  the same {len(plan)} judge calls, bare HTTPJudge       {calls_s * 1e3:8.1f} ms")
    print(
        f"  median paired difference (GenRM's end-to-end cost) {added_s * 1e3:8.1f} ms ({added_s / calls_s:+.1%}; "
        f"noise: the pairs range {min(t[0] - t[1] for t in timings) * 1e3:.0f} to "
        f"{max(t[0] - t[1] for t in timings) * 1e3:.0f} ms)"
    )
    print(
        f"  GenRM CPU work alone: prompts + parsing + aggregation {cpu_s * 1e3:6.2f} ms/group "
        f"(aggregate_group alone {agg_s * 1e6:.0f} us) = {cpu_s / calls_s:.1%} of the judge calls' time"
    )


# ----- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--latency", type=float, default=0.02, help="the server's time per reply, s (default 0.02)"
    )
    parser.add_argument("--concurrency", default="1,4,16,64", help="limits to measure (default 1,4,16,64)")
    parser.add_argument(
        "--seconds", type=float, default=1.0, help="about this long per run at the ideal rate (default 1)"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating runs of each client per level (default 3)"
    )
    parser.add_argument("--group", type=int, default=16, help="GenRM group size (default 16)")
    parser.add_argument("--repeats", type=int, default=9, help="GenRM groups timed; the median is shown")
    parser.add_argument(
        "--embedded", action="store_true", help="also measure serve-judge on the embedded model"
    )
    parser.add_argument(
        "--embedded-tokens", type=int, default=16, help="tokens per embedded reply (default 16)"
    )
    parser.add_argument("--device", default="cpu", help="device of the embedded model (default cpu)")
    parser.add_argument("--serve", type=float, metavar="LATENCY", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        return serve(args.serve)
    levels = [int(x) for x in args.concurrency.split(",")]

    proc, url = start([sys.executable, __file__, "--serve", str(args.latency)], "http://")
    try:
        print(
            f"latency server: {args.latency * 1e3:g} ms a reply; the ideal is concurrency / latency requests/s\n"
        )
        throughput_table(
            url, "bench", levels, lambda c: max(50, int(args.seconds * c / args.latency)), 64, args.rounds
        )
        if (Path(__file__).resolve().parents[1] / "envs" / "genrm" / "env.py").exists():
            genrm_section(url, args.group, max(levels), args.repeats)
    finally:
        proc.terminate()
        proc.wait(30)

    if args.embedded:
        command = [
            sys.executable,
            "-m",
            "cascade_envs",
            "serve-judge",
            "--port",
            "0",
            "--device",
            args.device,
            "--max-tokens",
            str(args.embedded_tokens),
        ]
        proc, url = start(command, "cascade-envs judge")
        try:
            print(
                f"\nserve-judge, embedded SmolLM2-135M on {args.device}, {args.embedded_tokens} tokens a reply:"
            )
            throughput_table(
                url,
                "SmolLM2-135M-Instruct",
                [c for c in levels if c <= 16] or levels,
                lambda c: max(8, 4 * c),
                args.embedded_tokens,
                args.rounds,
            )
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
