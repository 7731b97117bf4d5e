"""Question tasks check the answer: ``expected_answer`` must be in the final reply, no ``distractors`` may be.

First the matching rules (``answer.py``) on their own, then whole episodes of the bundled question
tasks: the right answer in several phrasings earns 1, a wrong one, none, or a list of every
candidate earns 0 (a legitimate 0 with its reason, never a masked reward).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from cascade_envs import DataError, Reward, TaskError
from cascade_envs.envs.workplace.answer import MAX_ANSWER_CHARS, MAX_DISTRACTORS, MAX_ITEMS, ExpectedAnswer
from cascade_envs.envs.workplace.env import WorkplaceEnv, bundled_tables
from tests.envs.workplace.replies import final_reply, stated_answer

TABLES = bundled_tables()


def expect(expected: Any, distractors: list[str] | None = None) -> ExpectedAnswer:
    row: dict[str, Any] = {"expected_answer": expected}
    if distractors is not None:
        row["distractors"] = distractors
    answer = ExpectedAnswer.from_row(row)
    assert answer is not None
    return answer


# ----- matching -----------------------------------------------------------------------------------

FOUND = [
    (
        "Ready for review: Icon set for new integrations",
        [
            'The subject was "READY FOR REVIEW - icon set for new\n   integrations".',
            "ready for review icon set for new integrations",
        ],
    ),
    ("1204", ["There were 1,204 visits.", "1204", "about 1204.0 in total", "visits: 1204!"]),
    ("273.4286", ["273 seconds", "273.4 s", "~273.43 seconds on average"]),
    ("0", ["Zara has 0 tasks in progress."]),
    ("00000064", ["event 64", "event 00000064"]),
    (
        "2025-11-11",
        [
            "on Nov 11",
            "on November 11th, 2025",
            "11 November",
            "11/11/2025",
            "2025-11-11 18:03:27",
            "Tuesday, Nov. 11",
        ],
    ),
    ("2pm", ["at 14:00", "at 2:00 PM", "at 2 p.m.", "14:00:00"]),
    ("Hannah Brooks", ["hannah.brooks@fernbrook.io", "HANNAH  BROOKS"]),
    (["Paloma Novak", "Wendell Ashby"], ["Wendell Ashby and Paloma Novak."]),
    ([["hannah.brooks@fernbrook.io", "Hannah Brooks"]], ["Hannah Brooks", "hannah.brooks@fernbrook.io"]),
    ([["0", "none", "no tasks"]], ["She has no tasks in progress.", "None.", "0"]),
]
NOT_FOUND = [
    ("Ready for review: Icon set for new integrations", ["Progress on Icon set for new integrations", ""]),
    ("1204", ["11204 visits", "1204.5", "12,040", "120 4", "one thousand two hundred and four"]),
    ("11", ["110", "11.5", "1.1", "Nov 11", "11/12"]),
    ("273.4286", ["273.5", "274", "270", "273.44"]),
    ("2025-11-11", ["Nov 11, 2024", "Nov 1", "November", "2025-11-12", "11/12/2025"]),
    ("2pm", ["3pm", "14:30", "2am"]),
    ("Ana", ["Banana", "Anastasia"]),
    ("Hannah Brooks", ["Hannah", "Hannah Kim"]),
    (["Paloma Novak", "Wendell Ashby"], ["Paloma Novak only"]),
]


@pytest.mark.parametrize(("expected", "replies"), FOUND, ids=[str(e) for e, _ in FOUND])
def test_the_answer_is_found_however_it_is_phrased(expected, replies):
    answer = expect(expected)
    for reply in replies:
        assert answer.check(reply) == (True, "the final reply states the expected answer"), reply


@pytest.mark.parametrize(("expected", "replies"), NOT_FOUND, ids=[str(e) for e, _ in NOT_FOUND])
def test_a_wrong_or_partial_answer_is_not_found(expected, replies):
    answer = expect(expected)
    for reply in replies:
        found, reason = answer.check(reply)
        assert not found and "does not state the expected answer" in reason, reply


def test_the_reason_names_what_is_missing():
    answer = expect(["Paloma Novak", ["wendell.ashby@quarryline.co", "Wendell Ashby"], "Caleb Whitlock"])
    found, reason = answer.check("Caleb Whitlock")
    assert not found
    assert reason.endswith("'Paloma Novak', 'wendell.ashby@quarryline.co' or 'Wendell Ashby' not found")


def test_a_distractor_in_the_reply_scores_0_even_beside_the_answer():
    answer = expect("11", ["13", "43", "Hannah Kim", "2025-11-03"])
    assert answer.check("11 visits (and 1, 2, 4 on single days)")[0]  # values not listed are fine
    for reply, stated in [
        ("11 or 13", "'13'"),
        ("11, out of 43 in all", "'43'"),
        ("11; ask Hannah Kim", "'Hannah Kim'"),
        ("11 since Nov 3", "'2025-11-03'"),
        ("11 (13.0 last week)", "'13'"),
    ]:
        found, reason = answer.check(reply)
        assert not found and reason == f"the final reply also states {stated}, a wrong answer to the question"
    assert answer.check("11 (13.4 on average)")[0]  # 13.4 is not 13


def test_listing_every_candidate_scores_0():
    numbers = expect("11", ["13", "43"])
    found, reason = numbers.check(" ".join(str(n) for n in range(2001)))  # ~9,000 characters
    assert not found and f"must fit in {MAX_ANSWER_CHARS:,}" in reason
    found, reason = numbers.check(
        " ".join(str(n) for n in range(301))
    )  # short enough: the distractors catch it
    assert not found and "also states '13'" in reason


def test_an_empty_or_huge_reply_is_refused_in_bounded_time():
    words = expect(["a " * 99 + "b"] * MAX_ITEMS, ["a " * 99 + "c"] * MAX_DISTRACTORS)
    numbers = expect(
        [[str(n + 0.5) for n in range(16)]] * MAX_ITEMS, [str(n) for n in range(MAX_DISTRACTORS)]
    )
    start = time.perf_counter()
    assert not words.check("")[0]
    assert not words.check("a " * (MAX_ANSWER_CHARS // 2))[0]  # the worst case for the token search
    assert not numbers.check("7 " * (MAX_ANSWER_CHARS // 2))[0]  # and for the numbers: 1,000 of them
    assert not numbers.check(" ".join(f"{n}.{n % 10}" for n in range(100, 430)))[
        0
    ]  # 330 decimals, under the cap
    assert not words.check("x" * (10 * 2**20))[0]
    assert time.perf_counter() - start < 0.5
    assert len(numbers.check("nothing")[1]) < 500  # a bounded reason, however long the items


BAD_FIELDS = [
    ({"expected_answer": 11}, "expected_answer", "a string or a list"),
    ({"expected_answer": []}, "expected_answer", "a string or a list"),
    ({"expected_answer": ["x"] * (MAX_ITEMS + 1)}, "expected_answer", "a string or a list"),
    ({"expected_answer": "  "}, "expected_answer", "non-empty"),
    ({"expected_answer": ["a", 7]}, "expected_answer", "expected_answer[1]"),
    ({"expected_answer": [[]]}, "expected_answer", "alternatives"),
    ({"expected_answer": "x" * 201}, "expected_answer", "at most 200 characters"),
    ({"expected_answer": "?!"}, "expected_answer", "no word or number"),
    ({"distractors": ["13"]}, "distractors", "only a row with an 'expected_answer'"),
    ({"expected_answer": "11", "distractors": "13"}, "distractors", "a list of at most"),
    ({"expected_answer": "11", "distractors": [["13"]]}, "distractors", "expected a string"),
    (
        {"expected_answer": "Hannah Brooks", "distractors": ["Hannah"]},
        "distractors",
        "a right reply would score 0",
    ),
    (
        {"expected_answer": "2025-11-11", "distractors": ["Nov 11"]},
        "distractors",
        "a right reply would score 0",
    ),
]


@pytest.mark.parametrize(("fields", "field", "message"), BAD_FIELDS, ids=[str(f) for f, _, _ in BAD_FIELDS])
def test_bad_answer_fields_are_refused_naming_the_field(fields, field, message):
    with pytest.raises(TaskError) as raised:
        ExpectedAnswer.from_row(fields)
    assert raised.value.field == field and message in str(raised.value)


def test_a_row_without_the_fields_has_no_answer_to_check():
    assert ExpectedAnswer.from_row({"ground_truth": []}) is None


# ----- episodes of the bundled question tasks -----------------------------------------------------


@pytest.fixture(scope="module")
def questions(env: WorkplaceEnv) -> dict[Any, dict[str, Any]]:
    found = {task["id"]: task for task in (t.row for t in env.tasks or []) if "expected_answer" in task}
    assert len(found) >= 9
    return found


def solution_texts(task: dict[str, Any]) -> list[str]:
    return [
        f"<tool_call>{json.dumps({'name': c['name'], 'arguments': json.loads(c['arguments'])})}</tool_call>"
        for c in task["solution"]
    ]


def play(env: WorkplaceEnv, task: dict[str, Any], texts: list[str]) -> Reward:
    """Play ``texts`` as the model's turns; the episode's reward (cut at the end if still running)."""

    async def run() -> Reward:
        episode = await env.astart(env.load(task))
        try:
            for text in texts:
                if not episode.done:
                    await env.aadvance(episode, text)
            if not episode.done:
                await env.atruncate(episode, "test: the replies ran out")
            return (await env.ascore_episodes([episode]))[0]
        finally:
            await env.aend(episode)

    return asyncio.run(run())


def answered(env: WorkplaceEnv, task: dict[str, Any], reply: str) -> Reward:
    """The solution's calls, then ``reply``."""
    return play(env, task, [*solution_texts(task), reply])


def items(task: dict[str, Any]) -> list[list[str]]:
    value = task["expected_answer"]
    return [
        [item] if isinstance(item, str) else item for item in ([value] if isinstance(value, str) else value)
    ]


def phrasings(task: dict[str, Any]) -> list[str]:
    """The answer said plainly, shouted with other punctuation, and with each item's last alternative after
    reasoning that weighs the distractors (the reasoning is not the answer)."""
    plain = final_reply(task)
    shouted = "ANSWER --  " + " ;\n ".join(i[0] for i in items(task)).upper() + " !!"
    weighed = ", ".join(task.get("distractors", [])[:4])
    last = f"<think>Could it be {weighed}? No.</think>It is: {', '.join(i[-1] for i in items(task))}."
    return [plain, shouted, last]


def test_the_right_answer_in_various_phrasings_earns_1(env, questions):
    for task in questions.values():
        for reply in phrasings(task):
            reward = answered(env, task, reply)
            assert reward.value == 1.0 and reward.components["answer_found"] == 1, (task["id"], reply, reward)
            assert reward.reason.endswith("the final reply states the expected answer")


def test_a_wrong_answer_or_none_scores_0(env, questions):
    for task in questions.values():
        cases = {"empty": "", "vague": "I looked into it and everything is in order."}
        if task.get("distractors"):
            wrong = task["distractors"][0]
            cases["wrong"] = f"The answer is {wrong}."
            cases["hedged"] = f"The answer is {stated_answer(task)}, or maybe {wrong}."
        for case, reply in cases.items():
            reward = answered(env, task, reply)
            assert reward.value == 0.0 and not reward.masked, (task["id"], case, reward)
            expected = {"empty": "no final answer", "hedged": "also states"}.get(
                case, "does not state the expected"
            )
            assert expected in reward.reason, (task["id"], case, reward.reason)


def directory_names(env: WorkplaceEnv) -> list[str]:
    """Every address in the directory and the full name it spells."""
    return [
        *env.workplace.directory,
        *(a.split("@")[0].replace(".", " ").title() for a in env.workplace.directory),
    ]


def test_listing_every_candidate_scores_0_on_every_question(env, questions):
    crm = [row["customer_name"] for row in env.workplace["customer_relationship_manager"]]
    emails = [row["subject"] for row in env.workplace["email"]]
    days = [f"2025-11-{d:02d}" for d in range(1, 31)]
    kinds = {
        "numbers": " ".join(map(str, range(501))),
        "people": ", ".join(directory_names(env)),
        "customers": ", ".join(crm),
        "days": ", ".join(days),
    }
    for task in questions.values():
        wanted = {w.casefold() for item in items(task) for w in item}
        kind = (
            "people"
            if any("@" in w for w in wanted)
            else "customers"
            if any(n.casefold() in wanted for n in crm)
            else "days"
            if any(d in wanted for d in days)
            else "numbers"
        )
        if any(
            s.casefold() in wanted for s in emails
        ):  # a subject: list every subject of its sender's search
            kind, kinds["subjects"] = (
                "subjects",
                ", ".join([*task["distractors"], *(i[0] for i in items(task))]),
            )
        listed = kinds[kind] + ", longer"  # the verdict word too, for the one question that asks for it
        reward = answered(env, task, listed)
        assert len(listed) <= MAX_ANSWER_CHARS and reward.value == 0.0 and not reward.masked, (
            task["id"],
            kind,
        )
        assert "also states" in reward.reason, (task["id"], kind, reward.reason)
        everything = answered(env, task, " ".join(map(str, range(2001))) + " " + listed)
        assert everything.value == 0.0 and "must fit in" in everything.reason, task["id"]


def test_state_and_answer_are_both_needed_and_the_reason_says_which_failed(env, questions):
    task = next(t for t in questions.values() if t["ground_truth"])  # a question that also asks for a write
    reads = [
        text
        for text, c in zip(solution_texts(task), task["solution"], strict=True)
        if c not in task["ground_truth"]
    ]
    right = final_reply(task)
    both = answered(env, task, right)
    no_write = play(env, task, [*reads, right])
    no_answer = answered(env, task, "Done.")
    neither = play(env, task, [*reads, "Done."])
    assert both.value == 1.0
    assert no_write.value == 0.0 and "differs from the expected one" in no_write.reason
    assert "states the expected answer" in no_write.reason
    assert no_answer.value == 0.0 and no_answer.reason.startswith(
        "the final state matches the expected one; "
    )
    assert "does not state the expected answer" in no_answer.reason
    assert "differs" in neither.reason and "does not state" in neither.reason
    cut = play(env, task, solution_texts(task))  # the writes made, the turn limit reached, no reply
    assert cut.value == 0.0 and "answered in the final reply, and none came" in cut.reason


def test_without_the_fields_a_row_keeps_the_state_only_rule(env, questions):
    """NeMo Gym's rows have no ``expected_answer``: their reward is the state's, whatever the reply says."""
    task = next(t for t in questions.values() if not t["ground_truth"])
    bare = {k: v for k, v in task.items() if k not in ("expected_answer", "distractors")}
    assert answered(env, bare, "Done.").value == 1.0
    assert answered(env, task, "Done.").value == 0.0


def test_a_bad_answer_field_rejects_the_row_naming_it(env, questions, tmp_path):
    task = next(iter(questions.values()))
    with pytest.raises(TaskError) as raised:
        env.load_task({**task, "expected_answer": {"answer": 11}})
    assert raised.value.field == "expected_answer"
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({**task, "id": "clash", "distractors": [stated_answer(task)]}) + "\n")
    with pytest.raises(DataError) as failed:
        WorkplaceEnv(str(path), tables=TABLES)
    assert f"{path}:1 (id clash)" in str(failed.value) and "distractors" in str(failed.value)
