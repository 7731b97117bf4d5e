import json
import subprocess
import sys

import pytest

from cascade_envs.cli import build_parser, main

COMMANDS = [
    "build-image",
    "list",
    "info",
    "eval",
    "train",
    "serve",
    "export",
    "serve-sandbox",
    "serve-judge",
    "filter",
    "rescore",
    "solve",
]


@pytest.mark.parametrize("command", [[], *[[c] for c in COMMANDS]])
def test_help_for_every_command(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: cascade-envs" in capsys.readouterr().out


def test_every_subcommand_has_help_text():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(COMMANDS)
    assert all(action.help for action in sub._choices_actions)


def test_list_shows_runtime_envs_as_json(capsys):
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert any(r["id"] == "toy/ExactAnswer-v0" and r["kind"] == "environment" for r in rows)


def test_info(capsys):
    assert main(["info", "toy/LookupTool-v0"]) == 0
    out = capsys.readouterr().out
    assert "tests.toy_envs:LookupToolEnv" in out and "max turns:    3" in out


def test_unknown_env_is_one_line_and_nonzero():
    proc = subprocess.run(
        [sys.executable, "-m", "cascade_envs", "info", "cascade/NoSuchEnv-v0"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert proc.stderr.startswith("cascade-envs: error: unknown environment 'cascade/NoSuchEnv-v0'")


def test_eval_against_a_server(chat_server, tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "\n".join(
            json.dumps({"id": f"t{i}", "prompt": f"ANSWER: {i}", "answer": str(i % 2)}) for i in range(4)
        )
    )
    out = tmp_path / "res.jsonl"
    code = main(
        [
            "eval",
            "--env",
            "toy/ExactAnswer-v0",
            "--tasks",
            str(tasks),
            "--policy",
            chat_server.url,
            "--model",
            "echo-answer",
            "-g",
            "2",
            "-o",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "toy/ExactAnswer-v0" in printed and "0.500" in printed
    assert len(out.read_text().splitlines()) == 8


@pytest.mark.parametrize(("seed", "sent"), [("5", [5, 6, 7, 8]), ("none", [None] * 4)])
def test_eval_sends_a_seed_per_request_or_none(chat_server, tmp_path, seed, sent):
    """``--seed N`` gives request i the seed N + i; ``--seed none`` sends no seed field at all."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "\n".join(json.dumps({"id": f"t{i}", "prompt": f"ANSWER: {i}", "answer": "0"}) for i in range(2))
    )
    argv = ["eval", "--env", "toy/ExactAnswer-v0", "--tasks", str(tasks), "--policy", chat_server.url]
    argv += [
        "--model",
        "echo-answer",
        "-g",
        "2",
        "--seed",
        seed,
        "--no-progress",
        "-o",
        str(tmp_path / "r.jsonl"),
    ]
    assert main(argv) == 0
    seeds = [r.get("seed") for r in chat_server.requests]
    assert sorted(seeds, key=lambda s: -1 if s is None else s) == sent


def test_a_bad_seed_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "--seed", "often"])
    assert "expected an integer or 'none'" in capsys.readouterr().err


def test_eval_with_a_mix_file_and_bad_weights(chat_server, tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "prompt": "ANSWER: 1", "answer": "1"}))
    mix = tmp_path / "mix.yaml"
    mix.write_text(f"envs:\n  toy/ExactAnswer-v0: {{weight: 2, kwargs: {{tasks: {tasks}}}}}\n")
    args = [
        "eval",
        "--mix",
        str(mix),
        "-n",
        "3",
        "--policy",
        chat_server.url,
        "--model",
        "echo-answer",
        "-o",
        str(tmp_path / "r.jsonl"),
        "--no-progress",
    ]
    assert main(args) == 0
    assert main(["eval", "--mix", "toy/ExactAnswer-v0=-1", "--policy", chat_server.url]) == 2
    assert "negative" in capsys.readouterr().err


def test_bad_mix_file_is_a_clear_error(tmp_path, capsys):
    mix = tmp_path / "mix.yaml"
    mix.write_text("envs: [1, 2")
    assert main(["eval", "--mix", str(mix)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_eval_defaults_come_from_one_place():
    from cascade_envs import defaults
    from cascade_envs.cli import build_parser
    from cascade_envs.trainer.config import RolloutConfig

    args = build_parser().parse_args(["eval"])
    rollout = RolloutConfig()
    assert (args.max_tokens, args.temperature, args.top_p, args.concurrency) == (
        defaults.DEFAULT_MAX_TOKENS,
        defaults.DEFAULT_TEMPERATURE,
        defaults.DEFAULT_TOP_P,
        defaults.DEFAULT_CONCURRENCY,
    )
    assert (rollout.max_tokens, rollout.temperature, rollout.top_p, rollout.concurrency) == (
        defaults.DEFAULT_MAX_TOKENS,
        defaults.DEFAULT_TEMPERATURE,
        defaults.DEFAULT_TOP_P,
        defaults.DEFAULT_CONCURRENCY,
    )


def test_serve_sandbox_finds_the_code_env_service(monkeypatch):
    import importlib

    from cascade_envs.cli import serve

    service = importlib.import_module(serve.SANDBOX_SERVICE_MODULE)
    seen = {}
    monkeypatch.setattr(service, "serve_sandbox", lambda **kw: seen.update(kw))
    assert (
        main(["serve-sandbox", "--port", "0", "--workers", "3", "--max-queue", "5", "--max-body-mb", "2"])
        == 0
    )
    assert seen == {
        "host": "127.0.0.1",
        "port": 0,
        "workers": 3,
        "backend": None,
        "max_queue": 5,
        "max_body_mb": 2.0,
        "token": None,
        "allow_remote": False,
    }


def test_eval_exits_nonzero_when_every_episode_failed(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    code = main(
        [
            "eval",
            "--policy",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--env",
            "cascade/MCQA-v0",
            "--limit",
            "2",
            "--request-timeout",
            "1",
            "--no-progress",
            "-o",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    assert code == 1 and "every episode failed" in captured.err
    assert "2 episode(s) failed" in captured.out and "connection" in captured.out.lower()
    assert len(out.read_text().splitlines()) == 2  # nothing lost: both failures are recorded
