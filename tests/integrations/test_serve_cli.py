"""``cascade-envs serve`` and ``cascade-envs export`` as a user runs them."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import httpx

from cascade_envs.cli import main
from cascade_envs.integrations.nemo_gym.export import gym_row
from cascade_envs.registry import make

TOKEN = "cli-test-token"


def test_serve_nemo_gym_from_the_command_line_with_a_token():
    env = {**os.environ, "CASCADE_ENVS_TOKEN": TOKEN}
    command = [sys.executable, "-m", "cascade_envs", "serve", "--protocol", "nemo-gym", "cascade/MCQA-v0"]
    proc = subprocess.Popen(
        [*command, "--port", "0", "--host", "0.0.0.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        match = re.search(r"on http://[^:]+:(\d+)", line)
        assert match, line + proc.stderr.read()  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{match.group(1)}"
        assert httpx.get(url + "/health").status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(url + "/health", headers=auth).json()["env"] == "cascade/MCQA-v0"
        mcqa = make("cascade/MCQA-v0")
        row = gym_row(mcqa, "cascade/MCQA-v0", mcqa.tasks[0])
        with httpx.Client(base_url=url, headers=auth) as client:
            assert client.post("/seed_session", json=row).status_code == 200
            answer = {
                "output": [
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "\\boxed{B}"}],
                    }
                ]
            }
            verified = client.post("/verify", json={**row, "response": answer}).json()
        assert verified["reward"] == (1.0 if row["cascade_row"]["expected_answer"] == "B" else 0.0)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    assert proc.returncode == 0


def test_serve_names_unknown_protocols_and_export_formats(capsys, tmp_path):
    assert main(["serve", "--protocol", "grpc", "cascade/MCQA-v0"]) == 2
    assert "unknown protocol 'grpc'; known: nemo-gym" in capsys.readouterr().err
    assert main(["export", "--format", "csv", "cascade/MCQA-v0", "-o", str(tmp_path / "x")]) == 2
    assert "unknown export format 'csv'" in capsys.readouterr().err


def test_export_nemo_gym_rows(tmp_path):
    out = tmp_path / "rows.jsonl"
    assert (
        main(["export", "--format", "nemo-gym", "cascade/Workplace-v0", "-o", str(out), "--limit", "3"]) == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    env = make("cascade/Workplace-v0")
    assert len(rows) == 3
    for row, loaded in zip(rows, env.tasks, strict=False):
        assert row["cascade_row"] == loaded.row and row["cascade_env"] == "cascade/Workplace-v0"
        assert row["task_source"] == "cascade_agent" and "agent_ref" not in row  # 0.7 routes by task_source
        messages = [
            {"role": m["role"], "content": m["content"]} for m in row["responses_create_params"]["input"]
        ]
        assert messages == env.prompt(loaded.task)  # the episode's own opening, tools announced in text mode
        assert "<tools>" in messages[0]["content"]
