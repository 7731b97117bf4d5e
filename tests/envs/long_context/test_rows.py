"""The public NeMo Gym rows (aalcr, equivalence_llm_judge) load unchanged, and the judge replies recorded
in their rollouts give the recorded rewards through this env, served by a real local judge server.

Documented differences from the upstream servers (tested below, never hidden):
- a judge reply that is not in the format (no verdict, a verdict in other words) scores 0 here, as
  upstream (aalcr flags ``invalid_judge_response``), only when the judge gives a verdict on the
  control request (the reference in the answer's place); when it fails that too, the sample is
  masked (the judge's fault, not the answer's);
- the equivalence server takes the first marker it finds anywhere in the reply; here only the last
  line is read;
- the public aalcr rows record 94K-113K input tokens, over this stage's 32K limit: the default
  env rejects them at load, naming the count; ``max_input_tokens=131_072`` (or ``None``) loads them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cascade_envs.core import Reward
from cascade_envs.data import DataError
from cascade_envs.env import run_sync
from cascade_envs.envs.long_context.env import LongContextQAEnv
from cascade_envs.judges import HTTPJudge
from tests.chat_server import ScriptedChatServer, Step

AALCR_RESULT_FIELDS = {
    "response",
    "reward",
    "invalid_judge_response",
    "invalid_model_response",
    "judge_responses_create_params",
    "judge_response",
}
LONG_ENOUGH = 131_072
NOWHERE = HTTPJudge("http://127.0.0.1:9/v1", model="judge")


def read(folder: Path, name: str) -> list[dict[str, Any]]:
    path = folder / name
    if not path.is_file():
        pytest.skip(f"reference rows not found at {path}")
    return [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]


@pytest.fixture(scope="module")
def aalcr(shared_data: Path) -> Path:
    return shared_data / "nemo-gym-rows" / "aalcr"


@pytest.fixture(scope="module")
def equivalence(shared_data: Path) -> Path:
    return shared_data / "nemo-gym-rows" / "equivalence_llm_judge"


@pytest.fixture
def server() -> Iterator[ScriptedChatServer]:
    with ScriptedChatServer(default=Step(status=500)) as scripted:
        yield scripted


def output_texts(response: dict[str, Any]) -> tuple[str, str]:
    """``(reasoning, final text)`` of a Responses-API ``response`` as the policy wrote them."""
    reasoning = [
        s["text"] for item in response["output"] if item["type"] == "reasoning" for s in item["summary"]
    ]
    text = [c["text"] for item in response["output"] if item["type"] == "message" for c in item["content"]]
    return "\n".join(reasoning), "".join(text)


def completion_of(response: dict[str, Any]) -> str:
    """The policy's raw output: its reasoning in a think block, then the final text."""
    reasoning, text = output_texts(response)
    return f"<think>{reasoning}</think>{text}" if reasoning else text


def fenced(prompt: str, title: str) -> str:
    found = re.findall(
        rf"<<{re.escape(title)} (Q[0-9a-f]+)>>\n(.*?)\n<</{re.escape(title)} \1>>", prompt, flags=re.DOTALL
    )
    assert len(found) == 1, f"expected one {title} section"
    return found[0][1]


def score_with(
    server: ScriptedChatServer, replies: list[str], row: dict[str, Any], answer: str, **kwargs: Any
) -> list[Reward]:
    """Score ``answer`` once per reply, the judge server answering with that reply (its n-th step answers its n-th request)."""
    answered = [*server.steps, *[server.default] * len(server.requests)][: len(server.requests)]
    server.steps = [*answered, *(Step(reply) for reply in replies)]
    env = LongContextQAEnv(
        judge_url=HTTPJudge(server.url, model="judge", timeout_s=2, backoff_s=0.01),
        max_input_tokens=LONG_ENOUGH,
        **kwargs,
    )

    async def go() -> list[Reward]:
        try:
            return [await env.areward(row, answer) for _ in replies]
        finally:
            await env.aclose()

    return run_sync(go())


# ----- rows load unchanged ------------------------------------------------------------------------------


def test_aalcr_rows_load_unchanged_when_the_limit_allows(aalcr: Path):
    rows = read(aalcr, "example.jsonl")
    env = LongContextQAEnv(rows, judge_url=NOWHERE, max_input_tokens=LONG_ENOUGH)
    assert [t.row for t in env.tasks] == rows
    assert env.prompt(env.tasks[0].task) == rows[0]["responses_create_params"]["input"]


def test_aalcr_rows_are_over_the_stage_limit_and_say_so(aalcr: Path):
    rows = read(aalcr, "example.jsonl")
    with pytest.raises(DataError) as caught:
        LongContextQAEnv(rows, judge_url=NOWHERE)
    message = str(caught.value)
    assert message.startswith(f"{len(rows)} malformed row(s)")
    assert (
        "field 'input_tokens': the input has 94,494 tokens (as recorded in the row's input_tokens), "
        "over the limit of 32,768 (max_input_tokens)"
    ) in message
    skipped = LongContextQAEnv(rows, judge_url=NOWHERE, on_bad_rows="skip")
    assert (len(skipped.tasks), skipped.tasks.skipped) == (0, len(rows))


def test_equivalence_rows_load_unchanged_under_the_default_limit(equivalence: Path):
    rows = read(equivalence, "example.jsonl")
    env = LongContextQAEnv(rows, judge_url=NOWHERE)
    for row, task in zip(rows, env.tasks, strict=True):
        assert task.row == row and 0 < task.task.input_tokens < 200  # the count made at load is kept


def test_both_layouts_and_the_rollout_rows_load_into_one_env(aalcr: Path, equivalence: Path):
    rows = (
        read(aalcr, "example.jsonl")
        + read(equivalence, "example.jsonl")
        + read(aalcr, "example_rollouts.jsonl")
        + read(equivalence, "example_rollouts.jsonl")
    )
    env = LongContextQAEnv(rows, judge_url=NOWHERE, max_input_tokens=LONG_ENOUGH)
    assert (len(env.tasks), env.tasks.skipped) == (len(rows), 0)


# ----- recorded judge replies give the recorded rewards ---------------------------------------------------


def test_aalcr_rollouts_reproduce_their_rewards(aalcr: Path, server: ScriptedChatServer):
    rollouts = read(aalcr, "example_rollouts.jsonl")
    assert {r["reward"] for r in rollouts} == {0.0, 1.0}
    for rollout in rollouts:
        row = {k: v for k, v in rollout.items() if k not in AALCR_RESULT_FIELDS}
        (reply,) = [c["text"] for item in rollout["judge_response"]["output"] for c in item["content"]]
        (reward,) = score_with(server, [reply], row, completion_of(rollout["response"]))
        assert (reward.value, reward.masked) == (rollout["reward"], False), rollout["_ng_rollout_index"]
        # the judge saw what upstream's judge saw: the question, the official answer and the final text only
        recorded = rollout["judge_responses_create_params"]["input"][0]["content"]
        question, official, candidate = re.search(
            r"for reference only: (.*)\nThe OFFICIAL ANSWER: (.*)\nCANDIDATE ANSWER TO ASSESS: (.*)\n\nReply only",
            recorded,
            flags=re.DOTALL,
        ).groups()
        ours = server.requests[-1]["messages"][0]["content"]
        assert fenced(ours, "QUESTION (for reference only)") == question.strip()
        assert fenced(ours, "OFFICIAL ANSWER") == official
        assert fenced(ours, "CANDIDATE ANSWER") == candidate == output_texts(rollout["response"])[1].strip()


def test_equivalence_rollouts_reproduce_their_rewards(equivalence: Path, server: ScriptedChatServer):
    rollouts = read(equivalence, "example_rollouts.jsonl")
    assert {r["reward"] for r in rollouts} == {0.0, 1.0}
    for rollout in rollouts:
        row = {k: v for k, v in rollout.items() if k not in {"response", "reward", "judge_evaluations"}}
        (evaluation,) = rollout["judge_evaluations"]  # one pass: upstream ran without its swap check
        reply = evaluation["response"]["output"][-1]["content"][-1]["text"]
        (reward,) = score_with(
            server, [reply], row, completion_of(rollout["response"]), judge_template="equivalence"
        )
        assert (reward.value, reward.masked) == (rollout["reward"], False)
        assert reward.components["verdicts"] == [evaluation["verdict_label"]]
        recorded = evaluation["responses_create_params"]["input"][0]["content"]
        question, gold, candidate = re.search(
            r"===== Inputs =====\nQUESTION:\n(.*)\n\nGOLD:\n(.*)\n\nCANDIDATE:\n(.*)$",
            recorded,
            flags=re.DOTALL,
        ).groups()
        ours = server.requests[-1]["messages"][0]["content"]
        assert (fenced(ours, "QUESTION"), fenced(ours, "GOLD ANSWER"), fenced(ours, "CANDIDATE ANSWER")) == (
            question,
            gold,
            candidate,
        )


# ----- where this env and upstream differ ---------------------------------------------------------------


def upstream_aalcr(reply: str) -> float:
    """The aalcr server's rule: 1 for exactly CORRECT after stripping, else 0 (invalid replies included)."""
    return 1.0 if reply.strip() == "CORRECT" else 0.0


def upstream_equivalence(reply: str) -> float:
    """The equivalence server's rule: the marker found first anywhere in the reply decides; none is 0."""
    equal, not_equal = reply.find("[[A=B]]"), reply.find("[[A!=B]]")
    return 1.0 if equal >= 0 and (not_equal < 0 or equal < not_equal) else 0.0


def score_once(
    server: ScriptedChatServer, reply: str, control: Step, row: dict[str, Any], answer: str, **kwargs: Any
) -> Reward:
    """Score ``answer`` with the judge replying ``reply``, then ``control`` to a control request, if one is sent."""
    server.steps, server.requests[:] = [Step(reply), control], []
    env = LongContextQAEnv(
        judge_url=HTTPJudge(server.url, model="judge", timeout_s=2, max_retries=0),
        max_input_tokens=LONG_ENOUGH,
        **kwargs,
    )
    try:
        return run_sync(env.areward(row, answer))
    finally:
        env.close()


CONTROL_VERDICT = {"correctness": "CORRECT", "equivalence": "Same.\n\n[[A=B]] they are equivalent"}


@pytest.mark.parametrize(
    ("template", "reply"),
    [
        ("correctness", "CORRECT"),
        ("correctness", "INCORRECT"),
        ("correctness", "correct"),
        ("correctness", "The candidate answer is CORRECT."),
        ("correctness", "**INCORRECT**"),
        ("equivalence", "Same.\n\n[[A=B]] they are equivalent"),
        ("equivalence", "Differs.\n\n[[A!=B]] they are not equivalent"),
        ("equivalence", "They are equivalent."),
    ],
)
def test_replies_score_as_upstream_when_the_judge_answers_the_control(
    server: ScriptedChatServer, aalcr: Path, template: str, reply: str
):
    row = read(aalcr, "example.jsonl")[0]
    control = Step(CONTROL_VERDICT[template])
    reward = score_once(server, reply, control, row, "Airline Industry (12)", judge_template=template)
    upstream = (upstream_aalcr if template == "correctness" else upstream_equivalence)(reply)
    assert (reward.value, reward.masked) == (upstream, False)
    if "unparseable judge reply" in (reward.reason or ""):
        assert (
            "control request" in reward.reason
            and "judge failed" not in reward.reason
            and reward.components["judge_fault"] == "answer"
        )
        assert len(server.requests) == 2
    else:
        assert len(server.requests) == 1  # a verdict needs no control


@pytest.mark.parametrize("template", ["correctness", "equivalence"])
def test_an_unparseable_reply_masks_where_the_control_fails_too(
    server: ScriptedChatServer, aalcr: Path, template: str
):
    """Upstream scores every unparseable reply 0; here the judge's own failures mask."""
    row = read(aalcr, "example.jsonl")[0]
    for control in (Step("I cannot grade this."), Step(status=500)):
        reward = score_once(server, "no verdict", control, row, "Airline Industry", judge_template=template)
        assert upstream_aalcr("no verdict") == upstream_equivalence("no verdict") == 0.0
        assert (
            reward.masked and "unparseable judge reply" in reward.error and "control request" in reward.error
        )


def test_the_documented_differences_occur(server: ScriptedChatServer, aalcr: Path):
    """The first-marker rule would pay 1 for a reply that ends in [[A!=B]]; here the last line decides: 0."""
    row = read(aalcr, "example.jsonl")[0]
    reply = "If it were [[A=B]] I would say so, but\n\n[[A!=B]] they are not equivalent"
    assert upstream_equivalence(reply) == 1.0
    (reward,) = score_with(server, [reply], row, "Airline Industry", judge_template="equivalence")
    assert (reward.value, reward.masked) == (0.0, False) and reward.components["verdicts"] == ["[[A!=B]]"]
    reply = "[[A=B]] they are equivalent\n\nThe numbers match."  # a marker, but not on the last line
    assert upstream_equivalence(reply) == 1.0
    control = Step(CONTROL_VERDICT["equivalence"])
    reward = score_once(server, reply, control, row, "Airline Industry", judge_template="equivalence")
    assert (reward.value, reward.masked) == (0.0, False) and "last line" in reward.reason
    assert upstream_aalcr("correct") == 0.0
    (reward,) = score_with(server, ["correct"], row, "Airline Industry")  # the control gets a 500
    assert reward.masked


def test_an_empty_final_answer_scores_zero_unjudged_as_upstream(server: ScriptedChatServer, aalcr: Path):
    """Upstream aalcr scores an empty output_text 0 without asking its judge (invalid_model_response); so does this env."""
    row = read(aalcr, "example.jsonl")[0]
    (reward,) = score_with(server, ["CORRECT"], row, "<think>Airline Industry (12)</think>")
    assert (reward.value, reward.masked) == (0.0, False) and server.requests == []
