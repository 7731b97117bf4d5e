"""Seeded generator of solvable Countdown tasks; it wrote the bundled ``data/countdown.jsonl``.

Each task is built from a random expression over its numbers, so it has at least one solution
(kept in the row as ``solution``, never shown to the model). Regenerate with::

    python -m cascade_envs_example.generate > cascade_envs_example/data/countdown.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from fractions import Fraction

DEFAULT_SEED = 20260101
DEFAULT_COUNT = 20
TARGET_RANGE = (10, 999)


def _combine(
    rng: random.Random, a: tuple[Fraction, str], b: tuple[Fraction, str]
) -> tuple[Fraction, str] | None:
    """Join two sub-expressions with a random operator whose result is a positive integer."""
    (x, ex), (y, ey) = a, b
    options = [(x + y, "+"), (x * y, "*")]
    if x > y:
        options.append((x - y, "-"))
    if y not in (0, 1) and x % y == 0:
        options.append((x / y, "/"))
    value, symbol = rng.choice(options)
    if value.denominator != 1 or value <= 0:
        return None
    return value, f"({ex} {symbol} {ey})"


def make_task(rng: random.Random, index: int) -> dict:
    """One solvable task: 3 or 4 numbers in 1..25 and a target in ``TARGET_RANGE``."""
    while True:
        nums = [rng.randint(1, 25) for _ in range(rng.choice((3, 4)))]
        pool = [(Fraction(n), str(n)) for n in nums]
        while len(pool) > 1:
            a = pool.pop(rng.randrange(len(pool)))
            b = pool.pop(rng.randrange(len(pool)))
            joined = _combine(rng, a, b)
            if joined is None:
                break
            pool.append(joined)
        if len(pool) != 1:
            continue
        value, expression = pool[0]
        target = int(value)
        if TARGET_RANGE[0] <= target <= TARGET_RANGE[1] and target not in nums:
            return {
                "id": f"countdown-{index:03d}",
                "nums": nums,
                "target": target,
                "solution": expression[1:-1],
            }


def generate(seed: int = DEFAULT_SEED, count: int = DEFAULT_COUNT) -> list[dict]:
    """``count`` tasks; the same seed always gives the same tasks."""
    rng = random.Random(seed)
    return [make_task(rng, i) for i in range(count)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT)
    args = parser.parse_args(argv)
    for row in generate(args.seed, args.count):
        sys.stdout.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
