"""Instruction following: IFEval, IF-RLVR (IFEvalG) and IFBench instructions with verifiable checks.

Rows load in the IFEval / IFBench layout (``key``, ``prompt``, ``instruction_id_list``,
``kwargs``) and in the Nemotron / NeMo Gym layout (``responses_create_params`` plus the same
fields, at the top level or under ``verifier_metadata``, with ``kwargs`` a list of dicts that
often lists every possible kwarg as null). Each instruction id and its kwargs are checked when the
task loads, so scoring never meets an unknown id or a missing kwarg.

Scoring follows IFEval: an empty answer follows no instruction; ``strict`` checks the answer as
it is, loose (``strict=False``) accepts an instruction when any of the eight standard variants
passes (first line, last line or both removed; asterisks stripped). The reward is 1 when every
instruction is followed (``binary``, as in IF-RL) or the fraction followed (``fraction``).
"""

from __future__ import annotations

from typing import Any

from cascade_envs.core import Reward, Task, TaskError
from cascade_envs.data import prompt_messages
from cascade_envs.env import Env

from .registry import get_instruction, load_families, validate_kwargs
from .text import ResourceUnavailable

REWARD_MODES = ("binary", "fraction")
FIELDS = ("instruction_id_list", "kwargs", "grading_mode", "prompt")
MAX_ANSWER_CHARS = 200_000


def response_variants(response: str, strict: bool) -> list[str]:
    """The texts an instruction is checked against: the response, or IFEval's eight loose variants."""
    if strict:
        return [response]
    lines = response.split("\n")
    trimmed = [
        response,
        "\n".join(lines[1:]).strip(),
        "\n".join(lines[:-1]).strip(),
        "\n".join(lines[1:-1]).strip(),
    ]
    return trimmed + [text.replace("*", "") for text in trimmed]


def _row_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The verifier fields of a row; ``verifier_metadata`` (newer NeMo Gym rows) wins over top level."""
    meta = row.get("verifier_metadata")
    if meta is not None and not isinstance(meta, dict):
        raise TaskError("must be an object", "verifier_metadata")
    meta = meta or {}
    return {name: meta[name] if name in meta else row.get(name) for name in FIELDS}


class InstructionFollowingEnv(Env):
    """Rewards a response for following the verifiable instructions in its prompt."""

    default_tasks = "bundled:instruction_following/samples.jsonl"

    def __init__(
        self,
        tasks: Any = None,
        *,
        strict: bool = True,
        reward_mode: str | None = None,
        max_answer_chars: int = MAX_ANSWER_CHARS,
        **kwargs: Any,
    ):
        """``reward_mode``: "binary" or "fraction"; None uses each row's ``grading_mode`` (else binary).

        ``max_answer_chars`` bounds the verification time: a longer final answer scores 0 with
        that reason (NLTK tokenization costs about 30 s per megabyte of adversarial text).
        """
        if reward_mode is not None and reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        if max_answer_chars < 1:
            raise ValueError("max_answer_chars must be positive")
        self.strict = bool(strict)
        self.reward_mode = reward_mode
        self.max_answer_chars = int(max_answer_chars)
        load_families()
        super().__init__(tasks, **kwargs)

    def load_task(self, row: dict[str, Any]) -> Task:
        prompt_messages(row)
        fields = _row_fields(row)
        ids, kwargs_list = fields["instruction_id_list"], fields["kwargs"]
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise TaskError("expected a non-empty list of instruction id strings", "instruction_id_list")
        if kwargs_list is None:
            kwargs_list = [None] * len(ids)
        if not isinstance(kwargs_list, list) or len(kwargs_list) != len(ids):
            raise TaskError(f"expected a list of {len(ids)} kwargs objects, one per instruction", "kwargs")
        checks = [{"id": i, "kwargs": validate_kwargs(i, k)} for i, k in zip(ids, kwargs_list, strict=True)]
        mode = fields["grading_mode"] or "binary"
        if mode not in REWARD_MODES:
            raise TaskError(f"must be one of {REWARD_MODES}, got {mode!r}", "grading_mode")
        return {**row, "checks": checks, "grading_mode": mode}

    def follow_list(self, task: Task, answer: str) -> list[bool]:
        """Whether ``answer`` follows each instruction of ``task`` (under this env's strictness)."""
        variants = [v for v in response_variants(answer, self.strict) if v.strip()]
        results = []
        for check in task["checks"]:
            checker = get_instruction(check["id"]).check
            results.append(any(checker(text, **check["kwargs"]) for text in variants))
        return results

    async def ascore(self, task: Task, answer: str) -> Reward:
        if "checks" not in task:
            task = self.load_task(task)
        if len(answer) > self.max_answer_chars:
            return Reward.zero(
                f"answer has {len(answer)} characters, over the {self.max_answer_chars} this env verifies"
            )
        try:
            followed = self.follow_list(task, answer)
        except ResourceUnavailable as exc:
            return Reward.failed(f"resource unavailable: {exc}")
        ids = [check["id"] for check in task["checks"]]
        fraction = sum(followed) / len(followed)
        mode = self.reward_mode or task["grading_mode"]
        value = fraction if mode == "fraction" else float(all(followed))
        failed = [i for i, ok in zip(ids, followed, strict=True) if not ok]
        components = {
            "instructions": [{"id": i, "followed": ok} for i, ok in zip(ids, followed, strict=True)],
            "followed_fraction": fraction,
            "strict": self.strict,
            "reward_mode": mode,
        }
        reason = None
        if failed:
            reason = "empty answer" if not answer.strip() else f"not followed: {', '.join(failed)}"
        return Reward(value, components, reason=reason)
