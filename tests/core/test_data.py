import json
import logging

import pytest

from cascade_envs import DataError, TaskError
from cascade_envs.data import load_tasks, prompt_messages, read_rows, resolve_path, task_id
from cascade_envs.env import run_sync
from cascade_envs.rollout import RolloutRunner
from tests.toy_envs import CharTemplatePolicy, ExactAnswerEnv


def write_jsonl(path, lines):
    path.write_bytes(
        b"\n".join(line if isinstance(line, bytes) else json.dumps(line).encode() for line in lines)
    )
    return path


def test_malformed_rows_are_reported_with_file_line_and_field(tmp_path):
    path = write_jsonl(
        tmp_path / "tasks.jsonl",
        [
            {"prompt": "ok", "answer": "1"},
            {"prompt": "no answer"},
            b"{not json",
            b"[1, 2]",
            {"prompt": "", "answer": "1"},
            b"\xff\xfe",
        ],
    )
    with pytest.raises(DataError) as err:
        ExactAnswerEnv(tasks=str(path))
    text = str(err.value)
    assert "5 malformed row(s)" in text
    assert f"{path}:2: field 'answer'" in text
    assert f"{path}:3: not valid JSON" in text
    assert f"{path}:4: a row must be a JSON object" in text
    assert f"{path}:5: field 'prompt': the prompt is empty" in text


def test_skip_mode_keeps_good_rows(tmp_path, caplog):
    path = write_jsonl(tmp_path / "t.jsonl", [{"prompt": "a", "answer": "1"}, {"prompt": "b"}])
    with caplog.at_level(logging.WARNING):
        env = ExactAnswerEnv(tasks=str(path), on_bad_rows="skip")
    assert len(env.tasks) == 1 and "t.jsonl:2" in caplog.text


def test_rows_that_break_validation_unexpectedly_are_named_and_skip_means_skip(tmp_path, caplog):
    nested: dict = {"prompt": "x", "answer": "1"}
    deep = nested
    for _ in range(5000):
        deep["more"] = {}
        deep = deep["more"]

    class Recursive(ExactAnswerEnv):
        def load_task(self, row):
            def depth(node):
                return 1 + max((depth(v) for v in node.values() if isinstance(v, dict)), default=0)

            depth(row)  # a validator that recurses, as a JSON-schema check does
            return super().load_task(row)

    rows = [
        {"id": "a", "prompt": "ok", "answer": "1"},
        {
            "id": "parts",
            "messages": [{"role": "user", "content": [{"type": "text", "text": 4}]}],
            "answer": "1",
        },
        nested,
        {"id": "b", "prompt": "fine", "answer": "2"},
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n" + json.dumps(rows[3]) + "\n")
    with pytest.raises(DataError) as err:
        ExactAnswerEnv(tasks=str(path))
    assert (
        f"{path}:2 (id parts): field 'messages': message 0: every content part's 'text' must be a string"
        in str(err.value)
    )
    with caplog.at_level(logging.WARNING):
        env = Recursive(tasks=rows, on_bad_rows="skip")
    assert [t.task_id for t in env.tasks] == ["a", "b"] and env.tasks.skipped == 2
    assert "<rows>:3: the row is nested too deeply to validate" in caplog.text
    assert "skipped 2 malformed row(s), kept 2" in caplog.text


def test_parquet_rows(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.Table.from_pylist([{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}]), path
    )
    assert [r for _, r in read_rows(path)][1] == {"prompt": "b", "answer": "2"}
    assert len(ExactAnswerEnv(tasks=str(path)).tasks) == 2


def test_each_env_instance_loads_its_own_tasks(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"prompt": "a", "answer": "1"}])
    a, b = ExactAnswerEnv(tasks=str(path)), ExactAnswerEnv(tasks=str(path))
    assert a.tasks is not b.tasks and a.tasks[0].task is not b.tasks[0].task
    assert a.tasks[0].row == {"prompt": "a", "answer": "1"} and a.tasks[0].task.answer == "1"
    write_jsonl(path, [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}])
    assert len(load_tasks(str(path), ExactAnswerEnv().load)) == 2


def test_missing_files():
    with pytest.raises(DataError, match="task file not found"):
        resolve_path("/nonexistent/tasks.jsonl")
    with pytest.raises(DataError, match=r"task file not found: bundled:nodomain/x\.jsonl"):
        resolve_path("bundled:nodomain/x.jsonl")


def test_prompt_layouts():
    nemo = {
        "responses_create_params": {
            "input": [
                {"role": "developer", "content": "s"},
                {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
            ]
        }
    }
    assert prompt_messages(nemo) == [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    assert prompt_messages({"messages": [{"role": "user", "content": "q"}]}) == [
        {"role": "user", "content": "q"}
    ]
    assert prompt_messages({"prompt": "q"}) == [{"role": "user", "content": "q"}]
    for bad in (
        {"prompt": []},
        {"prompt": 3},
        {"messages": [{"content": "x"}]},
        {"messages": [{"role": "user", "content": 5}]},
    ):
        with pytest.raises(TaskError):
            prompt_messages(bad)


def test_task_ids():
    assert task_id({"id": 7}) == "7" and task_id({"key": "k"}) == "k"
    assert task_id({"prompt": "x"}) == task_id({"prompt": "x"}) != task_id({"prompt": "y"})


def test_decode_json_field_decodes_text_keeps_values_and_names_the_field():
    from cascade_envs.data import decode_json_field

    assert decode_json_field('{"a": [1, 2]}', "f") == {"a": [1, 2]}
    assert decode_json_field({"a": 1}, "f") == {"a": 1}
    assert decode_json_field(None, "f") is None
    with pytest.raises(TaskError, match="not valid JSON") as info:
        decode_json_field("{broken", "meta.tests")
    assert info.value.field == "meta.tests"
    with pytest.raises(TaskError, match="nested too deeply"):
        decode_json_field("[" * 100_000 + "]" * 100_000, "f")


def test_a_row_is_loaded_once_never_per_episode():
    loads: list[str] = []

    class Counting(ExactAnswerEnv):
        def load_task(self, row):
            loads.append(row["id"])
            return super().load_task(row)

    rows = [{"id": str(i), "prompt": "q", "answer": "a"} for i in range(3)]
    env = Counting(tasks=rows)
    assert loads == ["0", "1", "2"]
    runner = RolloutRunner(CharTemplatePolicy(lambda messages: "a"), group_size=4, envs={"count": env})
    groups = runner.run([("count", loaded) for loaded in env.tasks])
    assert [g.rewards for g in groups] == [[1.0] * 4] * 3 and loads == ["0", "1", "2"]
    runner.run([("count", rows[0])])  # a raw row: loaded once for its group of 4
    run_sync(env.ascore_responses(rows[1], ["a", "b", "c"]))
    run_sync(env.areset(options={"task": rows[2]}))
    assert loads[3:] == ["0", "1", "2"]
