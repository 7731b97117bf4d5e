"""Verification throughput per domain (responses/s, one core), ours vs. a reference, in one run.

For every bundled sample it builds a correct and a wrong response (with a paragraph of reasoning
in front, as a model would write) and scores them all, repeatedly, for ``--seconds`` per side:

- MCQA: ``MCQAEnv.areward`` vs. a naive baseline (one regex for ``\\boxed{X}``, compare);
- MCQA with a row ``output_regex`` (checked in the env's verifier workers, hard timeout) vs. the
  same regex in-process;
- structured outputs: ``StructuredOutputEnv.areward`` vs. a naive baseline
  (``json.loads`` + ``jsonschema.validate`` against the strict schema on every call), on the
  short bundled documents (checked in-process) and on ~2-3k-character documents, the size of
  real model answers (checked in the env's verifier workers);
- math: ``MathEnv.areward`` (a worker process with a hard timeout, one worker) vs. calling
  ``math_verify.parse``/``verify`` directly in-process (no isolation, no timeout off the main
  thread). The ratio is the price of isolation.

Ours scores each pass as one concurrent batch on an event loop, as the rollout runner does; the
reference scores one response after another. The script also checks that ours and the reference
agree on every response. Run: ``python bench/bench_verifiers.py [--seconds 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

import jsonschema

from cascade_envs.envs.math.env import MathEnv
from cascade_envs.envs.math.verify import ANSWER_TARGETS, GOLD_TARGETS, strip_delimiters
from cascade_envs.envs.mcqa.env import MCQAEnv
from cascade_envs.envs.structured_outputs.env import StructuredOutputEnv
from cascade_envs.envs.structured_outputs.schema import strictify

REASONING = "Let me work through this carefully, checking each step against the definitions. " * 12


Cases = list[tuple[Any, str]]


def throughput(
    score_all: Callable[[Cases], list[float]], cases: Cases, seconds: float
) -> tuple[float, list[float]]:
    """Responses per second of ``score_all`` over ``cases`` (repeated for ``seconds``), and one pass's values."""
    values = score_all(cases)  # warm-up, and the values to compare
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        score_all(cases)
        done += len(cases)
    return done / (time.perf_counter() - start), values


def env_scorer(env: Any) -> Callable[[Cases], list[float]]:
    """Score a batch as the rollout runner does: concurrently, on one event loop."""
    loop = asyncio.new_event_loop()

    async def batch(cases: Cases) -> list[float]:
        return [r.value for r in await asyncio.gather(*(env.areward(task, text) for task, text in cases))]

    return lambda cases: loop.run_until_complete(batch(cases))


def one_by_one(score: Callable[[Any, str], float]) -> Callable[[Cases], list[float]]:
    return lambda cases: [score(task, text) for task, text in cases]


def mcqa_cases() -> tuple[Any, list[tuple[Any, str]], Callable[[Any, str], float]]:
    env = MCQAEnv()
    cases = []
    for task in env.tasks:  # Loaded items: the env scores the task, the naive baseline reads the row
        if task.row["grading_mode"] != "strict_single_letter_boxed" or task.row.get("template_metadata"):
            continue
        gold = task.row["expected_answer"]
        wrong = next(letter for option in task.row["options"] for letter in option if letter != gold)
        cases += [(task, f"{REASONING}\n\\boxed{{{gold}}}"), (task, f"{REASONING}\n\\boxed{{{wrong}}}")]
    boxed = re.compile(r"\\boxed\{([A-J])\}")

    def naive(task: Any, text: str) -> float:
        found = boxed.findall(text)
        return float(bool(found) and found[-1] == task.row["expected_answer"])

    return env, cases, naive


def mcqa_regex_cases() -> tuple[Any, list[tuple[Any, str]], Callable[[Any, str], float]]:
    env = MCQAEnv()
    cases = []
    for task in env.tasks:
        regex = (task.row.get("template_metadata") or {}).get("output_regex")
        if regex and isinstance(regex, str):
            gold = task.row["expected_answer"]
            wrong = next(letter for option in task.row["options"] for letter in option if letter != gold)
            cases += [(task, f"{REASONING}\nThe answer is {letter}") for letter in (gold, wrong)] * 5

    def naive(task: Any, text: str) -> float:
        found = re.findall(task.row["template_metadata"]["output_regex"], text, re.IGNORECASE)
        return float(bool(found) and found[-1].upper() == task.row["expected_answer"])

    return env, cases, naive


def structured_cases(copies: int = 1) -> tuple[Any, list[tuple[Any, str]], Callable[[Any, str], float]]:
    """JSON text-mode samples; ``copies > 1`` repeats each array/object member to grow the answer."""
    env = StructuredOutputEnv()
    cases = []
    for task in env.tasks:
        if task.row["schema_type"] != "json" or task.row["response_mode"] != "text":
            continue
        document = json.loads(task.row["reference_response"])
        if copies > 1:
            document = {k: v * copies if isinstance(v, (list, str)) else v for k, v in document.items()}
        good = json.dumps(document)
        wrong = json.dumps({**document, "unexpected": True})
        cases += [(task, good), (task, wrong)]

    def naive(task: Any, text: str) -> float:
        try:
            jsonschema.validate(json.loads(text), strictify(json.loads(task.row["schema_str"])))
        except (ValueError, jsonschema.ValidationError):
            return 0.0
        return 1.0

    return env, cases, naive


def math_cases() -> tuple[Any, list[tuple[Any, str]], Callable[[Any, str], float]]:
    from math_verify import parse, verify

    env = MathEnv(workers=1, timeout_s=30)
    cases = []
    for task in env.tasks:
        gold = strip_delimiters(task.row["expected_answer"])
        cases += [
            (task, f"{REASONING}\nSo the answer is \\boxed{{{gold}}}."),
            (task, f"{REASONING}\n\\boxed{{7/5}}"),
        ]

    def in_process(task: Any, text: str) -> float:
        gold = parse("\\boxed{" + strip_delimiters(task.row["expected_answer"]) + "}", GOLD_TARGETS)
        return float(verify(gold, parse(text, ANSWER_TARGETS)))

    return env, cases, in_process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per side and domain")
    args = parser.parse_args()
    print(
        f"{'domain':<12} {'responses':>9} {'chars':>6} {'ours (resp/s)':>14} {'reference (resp/s)':>19} {'ours/ref':>9}  reference"
    )
    for name, build, reference in (
        ("mcqa", mcqa_cases, "naive regex"),
        ("mcqa-regex", mcqa_regex_cases, "the row regex in-process"),
        ("structured", structured_cases, "naive json+jsonschema.validate"),
        ("struct-2k", lambda: structured_cases(copies=40), "naive json+jsonschema.validate"),
        ("math", math_cases, "math_verify in-process"),
    ):
        env, cases, baseline = build()
        ours, our_values = throughput(env_scorer(env), cases, args.seconds)
        ref, ref_values = throughput(one_by_one(baseline), cases, args.seconds)
        agree = (
            ""
            if our_values == ref_values
            else f"  (DISAGREE on {sum(a != b for a, b in zip(our_values, ref_values, strict=True))})"
        )
        size = sum(len(text) for _, text in cases) // len(cases)
        env.close()
        print(
            f"{name:<12} {len(cases):>9} {size:>6} {ours:>14.0f} {ref:>19.0f} {ours / ref:>9.2f}  {reference}{agree}"
        )


if __name__ == "__main__":
    main()
