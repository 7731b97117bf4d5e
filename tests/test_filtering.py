"""Difficulty filtering (``cascade_envs.filtering`` and ``cascade-envs filter``) on real envs.

A scripted policy answers MCQA rows by the mode each question names: ``always`` right, ``never``
right, ``sometimes`` (every other call of that prompt: 2 of 4), or ``fails`` (the policy errors, so
the rollout is masked).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cascade_envs.cli import main
from cascade_envs.core import Message
from cascade_envs.data import resolve_path
from cascade_envs.filtering import (
    FilterError,
    FilterJob,
    FilterSettings,
    filter_tasks,
    format_histogram,
    keeps_unsolved,
)
from cascade_envs.judges import JUDGE_URL_ENV
from cascade_envs.policy import PolicyError
from cascade_envs.testing import ScriptedPolicy
from tests.chat_server import ScriptedChatServer, Step

MCQA = "cascade/MCQA-v0"
OPTIONS = [{"A": "alpha"}, {"B": "beta"}, {"C": "gamma"}, {"D": "delta"}]


def mcqa_row(i: int, mode: str) -> dict[str, Any]:
    question = f"Question {i} (mode={mode}): pick one; answer inside \\boxed{{}}.\nA: alpha\nB: beta\nC: gamma\nD: delta"
    return {
        "uuid": f"q{i}",
        "responses_create_params": {"input": [{"role": "user", "content": question}]},
        "options": OPTIONS,
        "expected_answer": "A",
    }


def answer(text: str, calls: Counter[str]) -> str:
    """The scripted reply to an MCQA prompt; ``calls`` counts the calls per prompt."""
    match = re.search(r"mode=(\w+)", text)
    assert match, text
    calls[text] += 1
    if match.group(1) == "fails":
        raise PolicyError("policy server down")
    right = match.group(1) == "always" or (match.group(1) == "sometimes" and calls[text] % 2 == 1)
    return "<think>Let me see.</think>\\boxed{" + ("A" if right else "B") + "}"


def mcqa_policy(stall_after: int | None = None) -> ScriptedPolicy:
    """Answers each MCQA prompt by its mode; with ``stall_after``, calls past that many never return (a hung run)."""
    counts: Counter[str] = Counter()

    async def turn(messages: list[Message]) -> str:
        if stall_after is not None and sum(counts.values()) >= stall_after:
            await asyncio.Event().wait()
        return answer(messages[-1]["content"], counts)

    return ScriptedPolicy(turn)


def write_tasks(path: Path, modes: list[str]) -> list[bytes]:
    """A task file with one MCQA row per mode (``bad-json`` and ``bad-row`` make broken lines); its raw lines."""
    lines = []
    for i, mode in enumerate(modes):
        if mode == "bad-json":
            lines.append(b"{not json\n")
        elif mode == "bad-row":
            lines.append((json.dumps({**mcqa_row(i, mode), "expected_answer": "Z"}) + "\n").encode())
        else:  # odd spacing and non-ASCII text: kept rows must come out byte for byte
            lines.append(
                (
                    json.dumps(
                        mcqa_row(i, mode), indent=None, separators=(", ", " :  "), ensure_ascii=False
                    ).replace("alpha", "alphä")
                    + "\n"
                ).encode()
            )
    path.write_bytes(b"".join(lines))
    return lines


def outcomes(out_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out_dir / "outcomes.jsonl").read_text().splitlines()]


MODES = [
    "always",
    "never",
    "sometimes",
    "fails",
    "bad-json",
    "always",
    "never",
    "sometimes",
    "bad-row",
    "never",
    "sometimes",
    "always",
]


def test_outcomes_kept_rows_and_histogram(tmp_path):
    lines = write_tasks(tmp_path / "tasks.jsonl", MODES)
    policy = mcqa_policy()
    summary = filter_tasks(
        policy, MCQA, tmp_path / "tasks.jsonl", tmp_path / "out", FilterSettings(k=4), policy_id="scripted"
    )
    assert all(
        call.sampling.seed is None for call in policy.calls
    )  # a shared seed would make the k samples identical
    expected = {
        "always": "dropped_solved",
        "never": "kept",
        "sometimes": "kept",
        "fails": "incomplete",
        "bad-json": "bad_row",
        "bad-row": "bad_row",
    }
    got = outcomes(tmp_path / "out")
    assert [o["row"] for o in got] == list(range(1, len(MODES) + 1))
    assert [o["outcome"] for o in got] == [expected[m] for m in MODES]
    assert [o["solved"] for o in got if o["outcome"] != "bad_row"] == [4, 0, 2, 0, 4, 0, 2, 0, 2, 4]
    assert got[1] == {
        "row": 2,
        "id": "q1",
        "k": 4,
        "scored": 4,
        "solved": 0,
        "outcome": "kept",
        "pass_rate": 0.0,
        "reasons": ["solved 0/4; kept by the seeded draw (keep_unsolved=1)"],
    }
    incomplete = got[3]
    assert incomplete["scored"] == 0 and incomplete["pass_rate"] is None
    assert incomplete["reasons"] == [
        "0 of 4 rollouts scored; retried on the next run",
        "4x PolicyError: policy server down",
    ]
    assert "tasks.jsonl:5: not valid JSON" in got[4]["reasons"][0]
    assert "expected_answer" in got[8]["reasons"][0] and got[8]["id"] == "q8"
    kept_lines = [line for line, mode in zip(lines, MODES, strict=True) if expected[mode] == "kept"]
    assert (tmp_path / "out" / "kept.jsonl").read_bytes() == b"".join(kept_lines)
    assert summary.counts == {
        "kept": 6,
        "dropped_solved": 3,
        "dropped_unsolved": 0,
        "incomplete": 1,
        "bad_row": 2,
    }
    assert summary.histogram == [3, 0, 3, 0, 3] and not summary.complete  # the masked prompt is no 0/4
    assert (tmp_path / "out" / "histogram.txt").read_text() == format_histogram([3, 0, 3, 0, 3]) + "\n"
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert saved["prompts"] == 12 and saved["histogram"]["2/4"] == 3 and saved["played_this_run"] == 10
    rollouts = [json.loads(line) for line in (tmp_path / "out" / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 40 and Counter(r["row"] for r in rollouts)[3] == 4


def test_format_histogram():
    text = format_histogram([5, 0, 10], width=10)
    assert text.splitlines() == [
        "pass rate over 15 complete prompt(s), k=2",
        "0/2  0.00 |#####     | 5",
        "1/2  0.50 |          | 0",
        "2/2  1.00 |##########| 10",
    ]


def test_keep_unsolved_draw_is_seeded_per_identity():
    ids = [f"instance-{i}" for i in range(400)]
    settings = FilterSettings(k=16, keep_unsolved=0.1, seed=0)
    kept = {i for i in ids if keeps_unsolved(i, settings)}
    assert 0.07 <= len(kept) / len(ids) <= 0.13
    assert kept == {i for i in random.Random(1).sample(ids, len(ids)) if keeps_unsolved(i, settings)}
    other_seed = {i for i in ids if keeps_unsolved(i, FilterSettings(k=16, keep_unsolved=0.1, seed=1))}
    assert other_seed != kept and 0.07 <= len(other_seed) / len(ids) <= 0.13
    assert not any(keeps_unsolved(i, FilterSettings(keep_unsolved=0.0)) for i in ids)
    assert all(keeps_unsolved(i, FilterSettings(keep_unsolved=1.0)) for i in ids)


def test_swe_curation_keeps_the_seeded_tenth_in_any_order(tmp_path):
    modes = ["never"] * 300 + ["always"] * 20
    write_tasks(tmp_path / "tasks.jsonl", modes)
    settings = FilterSettings(k=2, keep_unsolved=0.1, seed=7)
    summary = filter_tasks(mcqa_policy(), MCQA, tmp_path / "tasks.jsonl", tmp_path / "a", settings)
    assert (
        summary.counts["dropped_solved"] == 20
        and summary.counts["kept"] + summary.counts["dropped_unsolved"] == 300
    )
    assert 0.06 <= summary.counts["kept"] / 300 <= 0.14
    kept = [json.loads(line)["uuid"] for line in (tmp_path / "a" / "kept.jsonl").read_text().splitlines()]
    assert kept == [f"q{i}" for i in range(300) if keeps_unsolved(f"q{i}", settings)]
    shuffled = (tmp_path / "tasks.jsonl").read_text().splitlines(keepends=True)
    random.Random(3).shuffle(shuffled)
    (tmp_path / "shuffled.jsonl").write_text("".join(shuffled))
    filter_tasks(mcqa_policy(), MCQA, tmp_path / "shuffled.jsonl", tmp_path / "b", settings)
    again = [json.loads(line)["uuid"] for line in (tmp_path / "b" / "kept.jsonl").read_text().splitlines()]
    assert sorted(again) == sorted(kept)


def test_resume_after_an_interruption_gives_the_same_outputs(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", MODES * 3)
    settings = FilterSettings(k=4, keep_unsolved=0.5)
    filter_tasks(mcqa_policy(), MCQA, tmp_path / "tasks.jsonl", tmp_path / "whole", settings, concurrency=8)

    job = FilterJob(MCQA, tmp_path / "tasks.jsonl", tmp_path / "cut", settings).open()
    hung = mcqa_policy(stall_after=30)

    async def interrupted() -> None:
        run = asyncio.ensure_future(job.arun(hung, concurrency=8))
        while len(hung.calls) <= 30:  # until a call hangs
            await asyncio.sleep(0.01)
        run.cancel()  # what Ctrl-C does to the run; a kill leaves the same flushed lines
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(interrupted())
    done = {o["row"] for o in outcomes(tmp_path / "cut") if o["outcome"] != "incomplete"}
    assert 0 < len(done) < len(MODES) * 3 and not (tmp_path / "cut" / "kept.jsonl").exists()
    with (tmp_path / "cut" / "outcomes.jsonl").open("a") as fh:
        fh.write('{"row": 36, "id": "q35", "k": 4, "sco')  # a line a kill cut short
    resumed = mcqa_policy()
    job = FilterJob(MCQA, tmp_path / "tasks.jsonl", tmp_path / "cut", settings).open()
    summary = job.run(resumed, concurrency=8)
    asked = [call.messages[-1]["content"] for call in resumed.calls]
    replayed = {int(re.search(r"Question (\d+)", text).group(1)) + 1 for text in asked}  # type: ignore[union-attr]
    playable = {row for row, mode in enumerate(MODES * 3, start=1) if not mode.startswith("bad")}
    assert replayed == playable - done and summary.played == len(playable - done)
    for name in ("kept.jsonl", "outcomes.jsonl", "histogram.txt"):
        assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_multi_turn_env(tmp_path):
    rows = [{"id": f"t{i}", "prompt": f"look up item {i}", "answer": f"value-{i}"} for i in range(4)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def look_up(messages: list[Message]) -> str:
        """Looks the value up for even items (then answers with it); guesses for odd ones."""
        if messages[-1]["role"] == "tool":
            return f"It is {messages[-1]['content']}"
        if int(messages[1]["content"].split()[-1]) % 2 == 0:
            return '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
        return "It is unknown"

    summary = filter_tasks(
        ScriptedPolicy(look_up),
        "toy/LookupTool-v0",
        tmp_path / "tasks.jsonl",
        tmp_path / "out",
        FilterSettings(k=3, keep_unsolved=0.0),
    )
    assert [o["outcome"] for o in outcomes(tmp_path / "out")] == ["dropped_solved", "dropped_unsolved"] * 2
    assert summary.histogram == [2, 0, 0, 2] and (tmp_path / "out" / "kept.jsonl").read_bytes() == b""
    turns = [
        json.loads(line)["turns"] for line in (tmp_path / "out" / "rollouts.jsonl").read_text().splitlines()
    ]
    assert sorted(set(turns)) == [1, 2]


def test_parquet_input_keeps_its_rows_and_schema(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [
        {"id": f"p{i}", "prompt": f"Question {i} (mode={mode})", "answer": "\\boxed{A}", "weight": i / 2}
        for i, mode in enumerate(["always", "never", "sometimes", "always"])
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "tasks.parquet")
    filter_tasks(
        mcqa_policy(), "toy/ExactAnswer-v0", tmp_path / "tasks.parquet", tmp_path / "out", FilterSettings(k=2)
    )
    assert [o["solved"] for o in outcomes(tmp_path / "out")] == [2, 0, 1, 2]
    kept = pq.read_table(tmp_path / "out" / "kept.parquet")
    assert kept.schema == pq.read_table(tmp_path / "tasks.parquet").schema
    assert kept.to_pylist() == rows[1:3]


def test_bad_settings_are_named():
    cases: list[tuple[dict[str, Any], str]] = [
        ({"k": 0}, "k must"),
        ({"keep_unsolved": 1.5}, "keep_unsolved"),
        ({"solved_threshold": float("nan")}, "solved_threshold"),
        ({"seed": "x"}, "seed"),
    ]
    for kwargs, key in cases:
        with pytest.raises(FilterError, match=key):
            FilterSettings(**kwargs)
    with pytest.raises(FilterError, match="env_kwargs: 'tasks'"):
        FilterJob(MCQA, "bundled:mcqa/samples.jsonl", "out", env_kwargs={"tasks": "x.jsonl"})


# ----- the command line ------------------------------------------------------------------------


def policy_server() -> ScriptedChatServer:
    """An OpenAI-compatible server answering as ``mcqa_policy`` does."""
    calls: Counter[str] = Counter()

    def script(request: dict[str, Any]) -> Step:
        try:
            return Step(answer(request["messages"][-1]["content"], calls))
        except PolicyError:
            return Step(status=400)  # not retried: the rollout fails at once

    return ScriptedChatServer(script, models=("policy",))


def filter_cli(tasks: Path, out: Path, *extra: str, server: ScriptedChatServer, env: str = MCQA) -> int:
    return main(
        [
            "filter",
            "--env",
            env,
            "--tasks",
            str(tasks),
            "--policy",
            server.url,
            "--model",
            "policy",
            "-o",
            str(out),
            "--no-progress",
            *extra,
        ]
    )


def test_cli_filters_resumes_and_refuses_other_arguments(tmp_path, capsys):
    write_tasks(tmp_path / "tasks.jsonl", ["always", "never", "sometimes", "never"])
    with policy_server() as server:
        assert (
            filter_cli(
                tmp_path / "tasks.jsonl", tmp_path / "out", "-k", "2", "--keep-unsolved", "0.5", server=server
            )
            == 0
        )
        printed = capsys.readouterr().out
        assert "pass rate over 4 complete prompt(s), k=2" in printed and "1/2  0.50 |" in printed
        summary = json.loads(printed[printed.index("{") :])
        assert summary["dropped_solved"] == 1 and summary["kept"] + summary["dropped_unsolved"] == 3
        requests = len(server.requests)
        assert requests == 8
        assert (
            filter_cli(
                tmp_path / "tasks.jsonl", tmp_path / "out", "-k", "2", "--keep-unsolved", "0.5", server=server
            )
            == 0
        )
        assert len(server.requests) == requests and '"played_this_run": 0' in capsys.readouterr().out
        for changed, shown in [
            (["-k", "3", "--keep-unsolved", "0.5"], "k: 2 -> 3"),
            (["-k", "2", "--keep-unsolved", "0.5", "--seed", "1"], "seed: 0 -> 1"),
            (["-k", "2"], "keep_unsolved: 0.5 -> 1.0"),
        ]:
            assert filter_cli(tmp_path / "tasks.jsonl", tmp_path / "out", *changed, server=server) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and shown in err and "--force" in err
        assert (
            filter_cli(tmp_path / "tasks.jsonl", tmp_path / "out", "-k", "3", "--force", server=server) == 0
        )
        assert [o["k"] for o in outcomes(tmp_path / "out")] == [3] * 4 and len(
            server.requests
        ) == requests + 12


def test_cli_dead_judge_gives_incomplete_then_a_rerun_decides(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(JUDGE_URL_ENV, raising=False)  # --judge-url sets it; restored after the test
    rows = resolve_path("bundled:long_context/samples.jsonl").read_text().splitlines(keepends=True)[:2]
    (tmp_path / "tasks.jsonl").write_text("".join(rows))
    args = ["--env-kwargs", '{"judge_timeout_s": 0.5, "judge_model": "judge"}', "-k", "2"]
    with ScriptedChatServer(
        default=Step("<think>Checked.</think>Alder Creek Pump Station, 31 hours"), models=("policy",)
    ) as server:
        with ScriptedChatServer() as dead:
            dead_url = dead.url
        code = filter_cli(
            tmp_path / "tasks.jsonl",
            tmp_path / "out",
            *args,
            "--judge-url",
            dead_url,
            server=server,
            env="cascade/LongContextQA-v0",
        )
        captured = capsys.readouterr()
        assert (
            code == 1
            and "2 prompt(s) incomplete" in captured.err
            and "rerun the same command" in captured.err
        )
        assert [o["outcome"] for o in outcomes(tmp_path / "out")] == ["incomplete"] * 2
        assert "judge" in outcomes(tmp_path / "out")[0]["reasons"][1]
        assert (tmp_path / "out" / "kept.jsonl").read_bytes() == b""  # neither kept nor dropped
        with ScriptedChatServer(default=Step("CORRECT")) as judge:
            code = filter_cli(
                tmp_path / "tasks.jsonl",
                tmp_path / "out",
                *args,
                "--judge-url",
                judge.url,
                server=server,
                env="cascade/LongContextQA-v0",
            )
        assert code == 0 and len(judge.requests) == 4
    assert [(o["outcome"], o["solved"]) for o in outcomes(tmp_path / "out")] == [("dropped_solved", 2)] * 2


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    write_tasks(tmp_path / "tasks.jsonl", ["always"])
    for extra, shown in [
        (["--env-kwargs", "[1]"], "--env-kwargs must be a JSON object"),
        (["--env-kwargs", "{"], "--env-kwargs is not valid JSON"),
        (["-k", "0"], "k must be a positive integer"),
        (["--tasks", str(tmp_path / "missing.jsonl")], "task file not found"),
    ]:
        code = main(
            [
                "filter",
                "--env",
                MCQA,
                "--tasks",
                str(tmp_path / "tasks.jsonl"),
                "-o",
                str(tmp_path / "o"),
                *extra,
            ]
        )
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and shown in err, err
