"""Code-block extraction: linear time on hostile answers, and the service's reduced answer round-trips."""

from __future__ import annotations

import random
import time

import pytest

from cascade_envs.envs.code.extract import as_answer, last_code_block


@pytest.mark.parametrize(
    "text",
    [
        "```" + "a" * 400_000 + "`",  # backtracked quadratically in the old fence pattern
        "```" + "a b" * 130_000 + "`",
        " " * 400_000 + "x",
        "`" * 400_000 + "\n" + "~" * 400_000,
    ],
    ids=["info-word", "info-words", "spaces", "fence-runs"],
)
def test_extraction_is_fast_on_hostile_answers(text):
    start = time.perf_counter()
    last_code_block(text)
    assert time.perf_counter() - start < 0.5


def test_reduced_answer_keeps_the_last_block():
    pieces = [
        "```",
        "````",
        "~~~",
        "`",
        "``",
        " ",
        "\t",
        "\n",
        "\n",
        "py",
        "cpp",
        "{.py}",
        "x",
        "a b",
        "C++",
        "\r",
    ]
    rng = random.Random(0)
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 25)))
        block = last_code_block(text)
        assert last_code_block(as_answer(block)) == block, text
    block = last_code_block("intro\n~~~python\nx = '''\n`````\n'''\n~~~\nbye")
    assert block is not None and block.code == "x = '''\n`````\n'''\n" and block.language == "python"
    assert last_code_block(as_answer(block)) == block
