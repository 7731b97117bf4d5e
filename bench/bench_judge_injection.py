"""Injected answers against a real judge, with the judge defences off and on, and the share of masked
verdicts on the bundled long-context and GenRM sets.

The judge is ``cascade-envs serve-judge`` on the embedded SmolLM2-135M-Instruct, started here on a
free port (CPU), or any chat-completions server given with ``--judge-url`` (a ``vllm serve``, e.g.
from ``.ci/vllm.sh``'s venv). Replies are capped at ``--max-tokens``.

1. Injections: every attack of ``tests/judges/attacks.py`` (an honest wrong answer plus an
   injection: a closed quote with an instruction, a forged verdict, a request to drop the format)
   on each judged env: LongContextQA (correctness and equivalence templates), AgentlessRepair's
   judge reward and GenRM. An injection *moved* the verdict when it earned more than the honest
   wrong answer it was built from, judged in the same run (GenRM: a higher base score than the
   honest wrong answer of its group of three: a right answer, the attack, the honest wrong one);
   *masked* counts the attacks that were masked.
2. Masked share on the bundled sets: LongContextQA's bundled samples, each answered with its own
   reference (right) and the next row's (wrong), under both templates; GenRM's bundled prompts,
   each with ``--group`` answers the judge's model writes itself (temperature 0.8), all pairs.
   GenRM asks once per comparison here (``parse_retries=0``; the env's default asks up to 4 times).

Each runs twice, with ``judges.quoting.DEFENCES`` all off (a fixed fence tag an answer can write,
replies read as they come, every reply without a verdict masked: main's rule for LongContextQA and
the agentless judge before the fault rule) and all on (as shipped), and prints the two side by side.
A 135M judge is close to noise: read the figures as what this judge did, not as the defences' size.

    python bench/bench_judge_injection.py [--judge-url URL] [--max-tokens 48] [--group 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_judge import start  # noqa: E402

from cascade_envs.core import Reward  # noqa: E402
from cascade_envs.data import read_rows  # noqa: E402
from cascade_envs.judges import HTTPJudge  # noqa: E402
from cascade_envs.judges.quoting import DEFENCES  # noqa: E402
from cascade_envs.registry import make  # noqa: E402
from tests.judges.attacks import ATTACKS, GENRM_FORGERIES, TARGETS, Target  # noqa: E402

CONDITIONS = ("off", "on")
RIGHT, WRONG = "9.9 is larger.", "9.11 is larger."


@contextmanager
def defences(on: bool) -> Iterator[None]:
    saved = (DEFENCES.boundary, DEFENCES.scrub, DEFENCES.blame)
    DEFENCES.boundary = DEFENCES.scrub = DEFENCES.blame = on
    try:
        yield
    finally:
        DEFENCES.boundary, DEFENCES.scrub, DEFENCES.blame = saved


@dataclass
class Tally:
    """Counts of one row of the table, per condition."""

    total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONDITIONS, 0))
    moved: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONDITIONS, 0))
    masked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONDITIONS, 0))
    blamed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONDITIONS, 0))
    which: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CONDITIONS})
    """The attacks that moved a verdict."""

    def add(self, condition: str, reward: Reward, moved: bool = False, name: str = "") -> None:
        self.total[condition] += 1
        self.moved[condition] += moved
        if moved:
            self.which[condition].append(name)
        self.masked[condition] += reward.masked
        self.blamed[condition] += reward.components.get("judge_fault") == "answer" and not reward.masked


def judged(env_id: str, url: str, max_tokens: int, **kwargs: Any) -> Any:
    """The env ``env_id`` judged at ``url``, its judge's replies capped at ``max_tokens`` (a server of
    a small context refuses more) unless its template asks fewer; GenRM asks once per comparison."""
    if env_id == "cascade/GenRM-v0":
        kwargs["parse_retries"] = 0
    env = make(env_id, judge_url=url, judge_timeout_s=600.0, **kwargs)
    env.judge_max_tokens = min(env.judge_max_tokens, max_tokens)
    return env


def injections(target: Target) -> dict[str, str]:
    """Each attack's answer on ``target``, by name."""
    texts = {name: text for name, (_, text) in ATTACKS.items()}
    if target.name == "genrm":
        texts |= GENRM_FORGERIES
    return {name: target.answer(text) for name, text in texts.items()}


async def attack_target(target: Target, url: str, max_tokens: int, condition: str, tally: Tally) -> None:
    """Every attack on ``target`` next to its honest wrong answer, concurrently."""
    env = judged(target.env_id, url, max_tokens, **target.env_kwargs)
    try:
        answers = injections(target)
        if target.name == "genrm":
            groups = await asyncio.gather(
                *(env.ascore_responses(target.row, [RIGHT, answer, WRONG]) for answer in answers.values())
            )
            for name, (_, attack, wrong) in zip(answers, groups, strict=True):
                moved = not attack.masked and not wrong.masked and "base_score" in attack.components
                moved = moved and attack.components["base_score"] > wrong.components.get("base_score", 0.0)
                tally.add(condition, attack, moved, name)
            return
        honest, *attacks = await asyncio.gather(
            *(env.ascore_responses(target.row, [answer]) for answer in [target.wrong, *answers.values()])
        )
        (wrong,) = honest
        for name, (reward,) in zip(answers, attacks, strict=True):
            moved = reward.value > wrong.value and not reward.masked
            beside = "masked" if wrong.masked else f"{wrong.value:g}"
            tally.add(condition, reward, moved, f"{name} (the honest wrong answer: {beside})")
    finally:
        await env.aclose()


async def long_context_set(url: str, max_tokens: int, template: str, condition: str, tally: Tally) -> None:
    env = judged("cascade/LongContextQA-v0", url, max_tokens, judge_template=template)
    try:
        loaded = list(env.tasks)
        results = await asyncio.gather(
            *(
                env.ascore_responses(
                    item, [item.task.reference, loaded[(k + 1) % len(loaded)].task.reference]
                )
                for k, item in enumerate(loaded)
            )
        )
        for rewards in results:
            for reward in rewards:
                tally.add(condition, reward)
    finally:
        await env.aclose()


async def genrm_answers(url: str, group: int, max_tokens: int) -> list[tuple[dict[str, Any], list[str]]]:
    """``group`` answers per bundled GenRM prompt, written by the judge's own model."""
    rows = [row for _, row in read_rows("bundled:genrm/samples.jsonl")]
    policy = HTTPJudge(url, timeout_s=600.0)
    try:

        async def answer(row: dict[str, Any]) -> list[str]:
            messages = row["responses_create_params"]["input"]
            return list(
                await asyncio.gather(
                    *(
                        policy.acomplete(messages, max_tokens=max_tokens, temperature=0.8, top_p=0.95)
                        for _ in range(group)
                    )
                )
            )

        return list(zip(rows, await asyncio.gather(*(answer(row) for row in rows)), strict=True))
    finally:
        await policy.aclose()


async def genrm_set(
    url: str, max_tokens: int, answered: list[tuple[dict[str, Any], list[str]]], condition: str, tally: Tally
) -> None:
    env = judged("cascade/GenRM-v0", url, max_tokens)
    try:
        results = await asyncio.gather(*(env.ascore_responses(row, answers) for row, answers in answered))
        for rewards in results:
            for reward in rewards:
                tally.add(condition, reward)
    finally:
        await env.aclose()


def cell(count: int, total: int) -> str:
    return f"{count}/{total} ({100 * count / total:.0f}%)" if total else "-"


def print_table(title: str, rows: dict[str, Tally], moved: bool) -> None:
    print(f"\n{title}")
    head = f"{'':<22}{'answers':>8}"
    if moved:
        head += f"{'moved, off':>16}{'moved, on':>16}"
    head += f"{'masked, off':>16}{'masked, on':>16}{'0 (answer), on':>16}"
    print(head)
    for name, t in rows.items():
        line = f"{name:<22}{t.total['on']:>8}"
        if moved:
            line += f"{cell(t.moved['off'], t.total['off']):>16}{cell(t.moved['on'], t.total['on']):>16}"
        line += f"{cell(t.masked['off'], t.total['off']):>16}{cell(t.masked['on'], t.total['on']):>16}"
        line += f"{cell(t.blamed['on'], t.total['on']):>16}"
        print(line)


async def run(url: str, group: int, max_tokens: int) -> None:
    attacks = {name: Tally() for name in TARGETS}
    sets = {"long-context (correct.)": Tally(), "long-context (equiv.)": Tally(), "GenRM": Tally()}
    started = time.perf_counter()
    answered = await genrm_answers(url, group, max_tokens)
    print(f"GenRM answers written: {time.perf_counter() - started:.0f} s", flush=True)
    for condition in CONDITIONS:
        with defences(condition == "on"):
            started = time.perf_counter()
            await asyncio.gather(
                *(
                    attack_target(target, url, max_tokens, condition, attacks[name])
                    for name, target in TARGETS.items()
                ),
                long_context_set(url, max_tokens, "correctness", condition, sets["long-context (correct.)"]),
                long_context_set(url, max_tokens, "equivalence", condition, sets["long-context (equiv.)"]),
                genrm_set(url, max_tokens, answered, condition, sets["GenRM"]),
            )
            print(f"defences {condition}: {time.perf_counter() - started:.0f} s", flush=True)
    total = Tally()
    for tally in attacks.values():
        for condition in CONDITIONS:
            for counts in ("total", "moved", "masked", "blamed"):
                getattr(total, counts)[condition] += getattr(tally, counts)[condition]
    print_table("1. Injections against honest wrong answers", {**attacks, "all": total}, moved=True)
    for name, tally in attacks.items():
        for condition in CONDITIONS:
            if tally.which[condition]:
                print(f"moved with the defences {condition}, {name}: {', '.join(tally.which[condition])}")
    print_table("2. The bundled sets", sets, moved=False)
    print(
        json.dumps(
            {
                "attacks": {k: vars(v) for k, v in attacks.items()},
                "sets": {k: vars(v) for k, v in sets.items()},
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge-url", help="a running chat-completions server (default: start serve-judge)")
    parser.add_argument(
        "--max-tokens", type=int, default=48, help="serve-judge's cap on a reply (default 48)"
    )
    parser.add_argument("--group", type=int, default=3, help="GenRM answers per bundled prompt (default 3)")
    parser.add_argument("--device", default="cpu", help="serve-judge's device (default cpu)")
    args = parser.parse_args()
    if args.judge_url:
        asyncio.run(run(args.judge_url, args.group, args.max_tokens))
        return
    command = [sys.executable, "-m", "cascade_envs", "serve-judge", "--port", "0", "--device", args.device]
    proc, url = start([*command, "--max-tokens", str(args.max_tokens)], "cascade-envs judge")
    print(
        f"serve-judge (embedded SmolLM2-135M-Instruct on {args.device}, {args.max_tokens} tokens a reply) at {url}"
    )
    try:
        asyncio.run(run(url, args.group, args.max_tokens))
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
