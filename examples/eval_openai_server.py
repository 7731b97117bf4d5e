"""Evaluate a model served over an OpenAI-compatible API (e.g. vLLM) on an env mix.

What it shows: ``make_policy(URL)`` (a chat-completions client with deadlines and retries), an
``EnvMix`` that draws tasks from several envs by weight, and a ``RolloutRunner`` that plays each
task ``--group-size`` times concurrently and returns scored groups; then the mean reward of each env
over its scored episodes and the count of masked ones (a verifier, judge or policy failure: left out
of the mean, never counted as 0).

Run it against any server that answers ``POST /v1/chat/completions``:

    vllm serve HuggingFaceTB/SmolLM2-135M-Instruct --port 8000 &
    python examples/eval_openai_server.py --url http://127.0.0.1:8000/v1 --num-tasks 64 --group-size 4

    cascade-envs serve-judge --port 8011 &      # the embedded SmolLM2 on CPU, no vLLM needed
    python examples/eval_openai_server.py --url http://127.0.0.1:8011/v1 --num-tasks 4 --group-size 2

The mix is ``mix.envs`` of a run config (default: examples/mix.yaml) or ``envs`` of a mix file
(``cascade-envs eval --mix``'s format). Requests carry no seed: vLLM's CPU build crashes on a seeded
request under load, and a server honours seeds only as far as its engine does; ``--seed`` fixes which
tasks are drawn. ``cascade-envs eval --policy URL --mix FILE`` is the same evaluation from the shell.
"""

from __future__ import annotations

import argparse
import asyncio
import math
from pathlib import Path
from typing import Any

import yaml

from cascade_envs.mix import EnvMix, parse_mix
from cascade_envs.rollout import GroupResult, RolloutRunner, SamplingParams, make_policy

HERE = Path(__file__).resolve().parent


def read_mix(path: str) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """Weights and env kwargs of a run config's ``mix.envs`` or a mix file's ``envs``."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    envs = data["mix"]["envs"] if "mix" in data else data["envs"]
    return parse_mix(envs, source=f"{path}: envs")


async def evaluate(args: argparse.Namespace) -> list[GroupResult]:
    weights, env_kwargs = read_mix(args.mix)
    mix = EnvMix(weights, seed=args.seed, env_kwargs=env_kwargs)  # makes each env once, with its kwargs
    policy = make_policy(args.url, model=args.model, timeout_s=args.timeout)
    runner = RolloutRunner(
        policy,
        sampling=SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature),
        group_size=args.group_size,
        concurrency=args.concurrency,  # episodes in flight, so requests the server batches together
        envs=mix.envs,
        results_path=args.output,  # every episode (messages, tokens, reward), appended group by group
    )
    try:
        return await runner.arun(mix.sample(args.num_tasks))
    finally:
        await mix.envs.aclose()  # the envs' verifier pools and judge clients
        await policy.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url", default="http://127.0.0.1:8000/v1", help="the server's base URL, ending in /v1"
    )
    parser.add_argument("--model", help="the served model's name (default: the first that /v1/models lists)")
    parser.add_argument("--mix", default=str(HERE / "mix.yaml"), help="run config or mix file YAML")
    parser.add_argument("--num-tasks", type=int, default=8, help="tasks drawn from the mix by weight")
    parser.add_argument("--group-size", type=int, default=2, help="samples per task")
    parser.add_argument("--max-tokens", type=int, default=256, help="generation limit of one reply")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=64, help="episodes played at once")
    parser.add_argument("--timeout", type=float, default=600.0, help="deadline of one request, seconds")
    parser.add_argument("--seed", type=int, default=0, help="seed of the task draw")
    parser.add_argument("--output", default="runs/eval_openai_server.jsonl", help="episodes JSONL")
    args = parser.parse_args()
    Path(args.output).unlink(missing_ok=True)  # the runner appends: start this run's file afresh

    groups = asyncio.run(evaluate(args))

    # Per env: the mean over scored episodes; masked ones are counted apart (their reason in the JSONL).
    print(f"{'env':<34} {'episodes':>8} {'scored':>6} {'masked':>6} {'mean reward':>11}")
    for env_id in sorted({g.env_id for g in groups}):
        episodes = [e for g in groups if g.env_id == env_id for e in g.episodes]
        scored = [e.reward.value for e in episodes if not e.reward.masked]
        mean = sum(scored) / len(scored) if scored else math.nan
        masked = len(episodes) - len(scored)
        print(f"{env_id:<34} {len(episodes):>8} {len(scored):>6} {masked:>6} {mean:>11.3f}")
    errors = [e.error for g in groups for e in g.episodes if e.error]
    if errors:
        print(f"{len(errors)} episode(s) failed, e.g.: {errors[0][:300]}")
    print(f"episodes: {args.output}")


if __name__ == "__main__":
    main()
