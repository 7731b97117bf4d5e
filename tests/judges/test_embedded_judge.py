"""The in-process ``embedded`` judge: registration, one shared model, the reply cap, think blocks."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cascade_envs.env import run_sync
from cascade_envs.judges import Judge, JudgeError, make_judge
from cascade_envs.judges import embedded as embedded_module
from cascade_envs.judges.embedded import EmbeddedJudge
from cascade_envs.registry import Spec, judges
from cascade_envs.testing import ScriptedPolicy

MESSAGES = [{"role": "user", "content": "say yes"}]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    from tests.trainer.toys import save_tiny

    return save_tiny(tmp_path_factory.mktemp("judge") / "model")


@pytest.fixture
def registered() -> Any:
    """The built-in registration (envs/__init__.py), made here as it does when it is not loaded."""
    name = "embedded"
    judges.ensure_loaded()
    had = name in judges
    if not had:
        judges.register(name, Spec(name, "cascade_envs.judges.embedded:EmbeddedJudge", plugin="<test>"))
    yield name
    if not had:
        judges.unregister(name)


def test_registered_name_makes_one_shared_model_and_replies_within_the_cap(registered, tiny_folder):
    first = make_judge("embedded", model=str(tiny_folder), concurrency=4, timeout_s=5.0)
    second = make_judge("embedded", model=str(tiny_folder))
    assert isinstance(first, EmbeddedJudge) and isinstance(first, Judge)
    assert first.policy is second.policy  # loaded once per process and model

    async def ask() -> list[str]:
        return [
            await first.acomplete(MESSAGES, max_tokens=1000, temperature=1.0),
            await second.acomplete(MESSAGES, max_tokens=3),
        ]

    long, short = run_sync(ask())
    tokenizer = first.policy.tokenizer
    assert isinstance(long, str) and len(tokenizer(long)["input_ids"]) <= first.max_tokens == 64
    assert len(tokenizer(short)["input_ids"]) <= 3
    run_sync(first.aclose())
    assert isinstance(
        run_sync(second.acomplete(MESSAGES, max_tokens=2)), str
    )  # closing one closes nothing shared


def test_reasoning_is_split_off_and_an_unclosed_think_block_is_an_error(monkeypatch):
    judge = EmbeddedJudge.__new__(EmbeddedJudge)
    judge.model, judge.max_tokens, judge.device, judge.timeout_s = "embedded", 8, None, 5.0
    judge.policy = policy = ScriptedPolicy("<think>weighing</think>VERDICT: yes", finish_reason="length")
    assert run_sync(judge.acomplete(MESSAGES, max_tokens=100, temperature=0.6, top_p=0.95)) == "VERDICT: yes"
    _, sampling, thinking = policy.calls[0]
    assert (sampling.max_tokens, sampling.temperature, sampling.top_p, thinking) == (8, 0.6, 0.95, True)
    judge.policy = ScriptedPolicy("<think>still weighing", finish_reason="length")
    with pytest.raises(JudgeError, match="never closed within 8 tokens"):
        run_sync(judge.acomplete(MESSAGES))


def test_a_reply_not_ready_in_time_is_an_error():
    judge = EmbeddedJudge.__new__(EmbeddedJudge)
    judge.model, judge.max_tokens, judge.device, judge.timeout_s = "embedded", 8, None, 0.2
    judge.policy = ScriptedPolicy("VERDICT: yes", delay_s=60)
    start = time.monotonic()
    with pytest.raises(JudgeError, match=r"no reply within 0\.2 s"):
        run_sync(judge.acomplete(MESSAGES))
    assert time.monotonic() - start < 5


def test_a_missing_model_folder_is_one_clear_error(tmp_path):
    embedded_module._POLICIES.clear()
    with pytest.raises(Exception, match="expected 'embedded' or a local checkpoint folder"):
        EmbeddedJudge(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="max_tokens must be at least 1"):
        EmbeddedJudge(str(tmp_path / "nope"), max_tokens=-1)
