"""``cascade/LongContextQA-v0``: questions over long documents, graded by an LLM judge.

The long-context RL stage of the recipe (RECIPE.md): inputs of at most 32K tokens, sequences of
at most 49K (``max_episode_tokens`` = 49,152 = 32,768 + 16,384, our reading of "49K"), no
overlong filtering (an answer cut at the length limit stays in the batch with reward 0), an LLM
judge (Qwen3-235B-A22B-Instruct-2507 in the report) asked whether the answer is CORRECT. The
policy answers in thinking mode (the design default: RECIPE.md names no mode for this stage, so
the choice is ours); the judge sees only the final answer, never the reasoning.

Rows, either layout, loaded unchanged:

- AA-LCR (NeMo Gym ``aalcr``): ``responses_create_params.input`` (the documents and the question),
  ``question``, ``answer``, and optionally ``input_tokens`` (the prompt's token count);
- equivalence (NeMo Gym ``equivalence_llm_judge``): the prompt, ``expected_answer`` and optionally
  ``question``; without it the judge is shown the prompt's last user message (its last
  ``MAX_QUESTION_CHARS`` characters when longer: the question follows the documents).

``expected_answer`` wins when a row has both reference fields. A row's ``template_metadata``
(answer-extraction regexes of some equivalence rows) is ignored: the judge sees the whole final
answer, as the upstream servers do by default.

Judge template (``judge_template``, one for every row; ``prompt.py``): ``"correctness"`` (default,
the AA-LCR question: reply exactly CORRECT or INCORRECT) or ``"equivalence"`` (reasons, then a
``[[A=B]]``/``[[A!=B]]`` line). ``swap_check=True`` asks a second time with the reference and the
answer exchanged after a positive verdict, and pays 1 only when both verdicts are positive (the
upstream ``check_twice_swap``; off by default there too).

Input limit: ``max_input_tokens`` (default 32,768; ``None``: no limit) is checked when a row
loads: an over-long row raises ``TaskError`` naming the count, how it was counted and the limit
(``on_bad_rows="skip"`` drops it with a warning instead). Counting: ``tokens.py`` (the row's
``input_tokens``, else ``tokenizer=``, else a conservative estimate from characters); the count is
kept in the task's ``input_tokens``.

Rewards: 1 when the judge's verdict is positive (both verdicts with ``swap_check``), else 0 with
the verdict as the reason. 0 without calling the judge: no final answer (nothing visible after
the reasoning: the kernel's no-answer rule), or an answer over ``max_answer_chars`` ("verifier
limit: ...", the answer's fault: it could not overflow the judge's context). A reply without a
verdict is weighed by ``cascade_envs.judges.fault``: the same task is sent with the reference in
the answer's place (the control request, at most once per task and ``judge_control_ttl_s``); when
the judge gives a verdict on that, the failure is the answer's and it scores 0 with the reason
(as upstream scores every unparseable reply), else the sample is masked. Masked, with the reason:
the judge call failed after its retries (down, 5xx, rate-limited past its budget, past its
deadline), or its reply had no verdict and neither had the control's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any, ClassVar

from cascade_envs.core import Message, Reward, Row, TaskError
from cascade_envs.data import Prompt
from cascade_envs.judges import JudgedEnv, JudgeError

from .prompt import JUDGE_TEMPLATES
from .tokens import RECORDED, make_counter, recorded_tokens

MAX_INPUT_TOKENS = 32_768
MAX_SEQUENCE_TOKENS = 49_152
MAX_ANSWER_CHARS = 16_000
"""About 4K tokens: far more than a QA answer needs, far less than would crowd the judge's context."""
MAX_QUESTION_CHARS = 4_000
REFERENCE_FIELDS = ("expected_answer", "answer")
PROMPT_FIELDS = ("responses_create_params", "messages", "prompt")


@dataclass(frozen=True)
class LongContextTask:
    """A row, checked: its prompt, what the judge is shown (question, reference) and its input's token count."""

    prompt: Prompt
    question: str
    reference: str
    input_tokens: int | None = None
    """The row's own count, else the one made at load (``None``: no limit, so none was made)."""


def reference_answer(row: Row) -> str:
    """The row's reference answer (``expected_answer``, else ``answer``) as text; ``TaskError`` if none."""
    for name in REFERENCE_FIELDS:
        value = row.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise TaskError(f"must be text (or a number), got {type(value).__name__}", name)
        text = str(value).strip()
        if not text:
            raise TaskError("the reference answer is empty", name)
        return text
    raise TaskError(
        "no reference answer: expected 'answer' (AA-LCR rows) or 'expected_answer'", "expected_answer"
    )


def judge_question(row: Row, messages: tuple[Message, ...]) -> str:
    """The question shown to the judge: ``question``, else the tail of the last user message of ``messages``
    (the row's prompt)."""
    value = row.get("question")
    if value is not None:
        if not isinstance(value, str) or not value.strip():
            raise TaskError("must be non-empty text", "question")
        return value.strip()
    users = [m["content"] for m in messages if m["role"] == "user" and m["content"].strip()]
    if not users:
        raise TaskError("no question: the row has no 'question' and its prompt no user message", "question")
    text = users[-1].strip()
    return text if len(text) <= MAX_QUESTION_CHARS else "[...] " + text[-MAX_QUESTION_CHARS:].lstrip()


class LongContextQAEnv(JudgedEnv[LongContextTask]):
    """Long-document QA scored by an LLM judge; see the module doc for rows, limits and rewards.

    ``max_input_tokens``: the longest prompt a row may have (``None``: no limit); ``tokenizer``: a
    local tokenizer (folder or cached name) for exact counts; ``judge_template``: ``"correctness"``
    or ``"equivalence"``; ``swap_check``: the second, swapped judge pass; ``judge_max_tokens``: the
    judge's reply budget (default: the template's, 16 or 1024 tokens); ``max_answer_chars``: longer
    answers score 0 unjudged. Judge settings (``judge_url``, ...) are ``JudgedEnv``'s.
    """

    default_tasks: ClassVar[str | None] = "bundled:long_context/samples.jsonl"
    max_episode_tokens: int | None = MAX_SEQUENCE_TOKENS

    def __init__(
        self,
        tasks: Any = None,
        *,
        max_input_tokens: int | None = MAX_INPUT_TOKENS,
        tokenizer: str | None = None,
        judge_template: str = "correctness",
        swap_check: bool = False,
        max_answer_chars: int = MAX_ANSWER_CHARS,
        **kwargs: Any,
    ):
        if judge_template not in JUDGE_TEMPLATES:
            raise ValueError(
                f"unknown judge_template {judge_template!r}; choose from {sorted(JUDGE_TEMPLATES)}"
            )
        if max_input_tokens is not None and max_input_tokens < 1:
            raise ValueError("max_input_tokens must be at least 1 (or None for no limit)")
        if max_answer_chars < 1:
            raise ValueError("max_answer_chars must be at least 1")
        self.template = JUDGE_TEMPLATES[judge_template]
        self.swap_check = bool(swap_check)
        self.judge_max_tokens = self.template.max_tokens  # JudgedEnv's judge_max_tokens= overrides it
        self.max_answer_chars = int(max_answer_chars)
        self.max_input_tokens = max_input_tokens
        self.counter = make_counter(tokenizer)
        self.system_prompt = kwargs.get("system_prompt")  # counted with the prompt, before Env sets it
        super().__init__(tasks, **kwargs)

    def load_task(self, row: Row) -> LongContextTask:
        """Check a row and, with a limit, that its input fits (counted here when the row has no count)."""
        prompt, reference = Prompt.of(row), reference_answer(row)
        task = LongContextTask(prompt, judge_question(row, prompt.messages), reference, recorded_tokens(row))
        if self.max_input_tokens is None:
            return task
        field: str | None
        if task.input_tokens is not None:
            count, how, field = task.input_tokens, RECORDED, "input_tokens"
        else:
            count, how = self.counter.count(self.prompt(task)), self.counter.how
            field = next((f for f in PROMPT_FIELDS if f in row), None)
        if count > self.max_input_tokens:
            raise TaskError(
                f"the input has {count:,} tokens ({how}), over the limit of "
                f"{self.max_input_tokens:,} (max_input_tokens)",
                field,
            )
        return replace(task, input_tokens=count)

    async def ascore(self, task: LongContextTask, answer: str) -> Reward:
        answer = answer.strip()
        info: dict[str, Any] = {"judge_template": self.template.name, "verdicts": []}
        if len(answer) > self.max_answer_chars:
            return Reward.zero(
                f"verifier limit: the answer has {len(answer):,} characters, over "
                f"max_answer_chars={self.max_answer_chars:,}",
                **info,
            )
        question, reference = task.question, task.reference
        passes = [(reference, answer), (answer, reference)] if self.swap_check else [(reference, answer)]
        right_word, wrong_word = self.template.verdicts
        for number, (key, candidate) in enumerate(passes):
            messages, quote = self.template.messages(question, key, candidate, untrusted=(answer,))
            try:
                right = await self.ajudge(messages, partial(self.template.parse, quote=quote), quote)
            except JudgeError as exc:
                return await self.ablame(
                    exc, (question, reference), partial(self._control, task), "judge: ", **info
                )
            info["verdicts"].append(right_word if right else wrong_word)
            if not right:
                swapped = " in the swapped check (reference and answer exchanged)" if number else ""
                return Reward.zero(f"the judge's verdict{swapped}: {wrong_word}", **info)
        return Reward(1.0, info)

    async def _control(self, task: LongContextTask) -> bool:
        """The control request: the task with the reference as the candidate answer (no policy text)."""
        messages, quote = self.template.messages(task.question, task.reference, task.reference)
        return await self.ajudge(messages, partial(self.template.parse, quote=quote), quote)
