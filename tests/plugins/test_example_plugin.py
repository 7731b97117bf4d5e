"""End to end: the example plugin installed with pip is discovered, built and scored; broken
plugins are isolated; uninstalling removes it.

The plugin is pip-installed into the running interpreter's environment and uninstalled when the
module ends (even on failure). Every check runs in a fresh interpreter, so entry points are
rescanned. A file lock serialises installs across pytest-xdist workers; with
``--dist loadgroup`` the whole module also runs on one worker.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("plugin-install")

PLUGIN_DIR = Path(__file__).resolve().parents[2] / "examples" / "cascade-envs-example-plugin"
DIST, VERSION = "cascade-envs-example-plugin", "0.1.0"
DISABLE = "CASCADE_ENVS_DISABLE_PLUGIN_AUTOLOAD"
PROBE_BUILTIN = "cascade/ProbeBuiltin-v0"
PROBE = f"""
import cascade_envs.envs
PROBE_BUILTIN = {PROBE_BUILTIN!r}
cascade_envs.envs.BUILTIN_ENVS[PROBE_BUILTIN] = ("gymnasium.envs.classic_control.cartpole:CartPoleEnv", {{}})
"""


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args, "-q", "--disable-pip-version-check"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"


class Plugin:
    """The example plugin's install state in this interpreter's environment."""

    def __init__(self, source: Path):
        self.source = source
        self.installed = False

    def install(self) -> None:
        if not self.installed:
            pip("install", "--no-deps", "--no-build-isolation", "--no-index", str(self.source))
            self.installed = True

    def uninstall(self) -> None:
        pip("uninstall", "-y", DIST)
        self.installed = False


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    # A copy, so the build leaves no build/ or *.egg-info in the source tree.
    source = tmp_path_factory.mktemp("plugin-src") / PLUGIN_DIR.name
    shutil.copytree(PLUGIN_DIR, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    key = hashlib.sha1(sys.prefix.encode()).hexdigest()[:12]
    with open(Path(tempfile.gettempdir()) / f"cascade-envs-plugin-install-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = Plugin(source)
        try:
            yield state
        finally:
            state.uninstall()
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def installed(plugin: Plugin) -> Plugin:
    plugin.install()
    return plugin


@pytest.fixture(scope="module")
def broken_plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sys.path folder holding two throwaway distributions with broken ``cascade_envs`` plugins."""
    root = tmp_path_factory.mktemp("broken-plugins")
    write_dist(
        root,
        "cascade-envs-broken-import",
        "1.0",
        "broken-import",
        "broken_import",
        'raise RuntimeError("boom at import")\n',
    )
    write_dist(
        root,
        "cascade-envs-broken-hook",
        "2.0",
        "broken-hook",
        "broken_hook",
        textwrap.dedent("""
        from cascade_envs.plugins import hookimpl

        @hookimpl
        def cascade_envs_register_envs(register):
            register("broken/Hook-v0", entry_point="broken_hook:Nothing")
            raise ValueError("boom in hook")
    """),
    )
    return root


@pytest.fixture(scope="module")
def half_broken_plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plugin whose env hook works and whose sandbox hook fails; one whose env is not an env."""
    root = tmp_path_factory.mktemp("half-broken-plugins")
    write_dist(
        root,
        "cascade-envs-half",
        "1.0",
        "half",
        "half_plugin",
        textwrap.dedent("""
        from cascade_envs.plugins import hookimpl

        @hookimpl
        def cascade_envs_register_envs(register):
            register("half/Env-v0", entry_point="cascade_envs.envs.mcqa.env:MCQAEnv")

        @hookimpl
        def cascade_envs_register_sandboxes(register):
            register("half-sandbox", entry_point="half_plugin:Nothing")
            raise ValueError("boom in the sandbox hook")
    """),
    )
    write_dist(
        root,
        "cascade-envs-not-env",
        "3.1",
        "not-env",
        "not_env_plugin",
        textwrap.dedent("""
        from cascade_envs.plugins import hookimpl

        def make_dict(**kwargs):
            return {"i am": "not an env"}

        @hookimpl
        def cascade_envs_register_envs(register):
            register("odd/Dict-v0", entry_point="not_env_plugin:make_dict")
    """),
    )
    return root


def test_a_broken_plugin_leaves_nothing_behind_and_make_refuses_non_envs(
    half_broken_plugins: Path, tmp_path: Path
) -> None:
    result, _ = run_python(
        """
        import json
        import cascade_envs
        from cascade_envs.registry import sandboxes

        try:
            cascade_envs.make("odd/Dict-v0")
            odd = None
        except cascade_envs.CascadeError as exc:
            odd = str(exc)
        print(json.dumps({"ids": sorted(cascade_envs.env_specs()), "sandboxes": sorted(sandboxes), "odd": odd}))
    """,
        tmp_path,
        pythonpath=half_broken_plugins,
    )
    assert "half/Env-v0" not in result["ids"] and "half-sandbox" not in result["sandboxes"]
    assert "odd/Dict-v0" in result["ids"]
    assert "made a dict, not an environment" in result["odd"]
    assert "not_env_plugin:make_dict" in result["odd"] and "cascade-envs-not-env 3.1" in result["odd"]


def write_dist(root: Path, dist: str, version: str, name: str, module: str, source: str) -> None:
    (root / f"{module}.py").write_text(source)
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[cascade_envs]\n{name} = {module}\n")


def run(args: list[str], tmp_path: Path, *, pythonpath: Path | None = None, disable: str | None = None):
    """Run ``args`` in a fresh process, outside the repository, with a controlled environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", DISABLE)}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    if disable is not None:
        env[DISABLE] = disable
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done


def run_python(code: str, tmp_path: Path, *, probe: bool = False, **kwargs) -> tuple[dict, str]:
    """Run ``code`` in a fresh interpreter; it prints one JSON object last. Returns it and stderr.

    ``probe`` first adds a built-in env, so "built-ins still load" is checked even with none yet.
    """
    code = (PROBE if probe else "") + textwrap.dedent(code)
    done = run([sys.executable, "-c", code], tmp_path, **kwargs)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_cli_lists_plugin_with_distribution_and_version(
    installed: Plugin, broken_plugins: Path, tmp_path: Path
) -> None:
    script = Path(sys.executable).with_name("cascade-envs")
    args = [str(script)] if script.exists() else [sys.executable, "-m", "cascade_envs"]
    out = run([*args, "list"], tmp_path).stdout
    for env_id in ("example/Countdown-v0", "example/CountdownTools-v0", "example/GuessNumber-v0"):
        line = next((line for line in out.splitlines() if env_id in line), "")
        assert re.search(rf"{DIST}\s+{re.escape(VERSION)}", line), (
            f"{env_id} not listed with {DIST} {VERSION}:\n{out}"
        )
    with_broken = run([*args, "list"], tmp_path, pythonpath=broken_plugins).stdout
    assert "example/Countdown-v0" in with_broken  # the good plugin survives broken neighbours
    assert "broken-import" in with_broken and "broken-hook" in with_broken  # and the broken ones are shown


def test_discovered_lazily_with_its_distribution(installed: Plugin, tmp_path: Path) -> None:
    result, stderr = run_python(
        """
        import json, sys
        import cascade_envs
        after_import = sorted(m for m in sys.modules if m.startswith("cascade_envs_example"))
        spec = cascade_envs.spec("example/Countdown-v0")
        after_discovery = sorted(m for m in sys.modules if m.startswith("cascade_envs_example"))
        env = cascade_envs.make("example/Countdown-v0")
        print(json.dumps({
            "after_import": after_import, "after_discovery": after_discovery,
            "spec": [spec.plugin, spec.distribution, spec.version, spec.entry_point],
            "file": sys.modules["cascade_envs_example"].__file__,
            "ids": sorted(cascade_envs.env_specs()), "ntasks": len(env.tasks),
        }))
    """,
        tmp_path,
    )
    assert result["after_import"] == []  # `import cascade_envs` does not run discovery
    assert result["after_discovery"] == [
        "cascade_envs_example",
        "cascade_envs_example.plugin",
    ]  # env modules wait for make()
    assert result["spec"] == ["example", DIST, VERSION, "cascade_envs_example.countdown:CountdownEnv"]
    assert "site-packages" in result["file"]  # the installed copy, with its bundled data
    assert {"example/Countdown-v0", "example/CountdownTools-v0", "example/GuessNumber-v0"} <= set(
        result["ids"]
    )
    assert result["ntasks"] == 20
    assert "plugin" not in stderr  # nothing reported as failing


def test_gymnasium_make_with_module_prefix_scores_an_episode(installed: Plugin, tmp_path: Path) -> None:
    result, _ = run_python(
        """
        import json
        import gymnasium

        env = gymnasium.make("cascade_envs.gym:example/Countdown-v0")
        rewards = []
        for answer in ("solution", "1 + 1"):
            obs, info = env.reset(seed=7)
            row = next(t.row for t in env.unwrapped.tasks if t.task_id == info["task_id"])
            text = row["solution"] if answer == "solution" else answer
            _, reward, terminated, truncated, info = env.step(f"<think>...</think><answer>{text}</answer>")
            rewards.append([reward, terminated, truncated, info["reward"].reason])
        print(json.dumps({"type": type(env.unwrapped).__name__, "prompt": obs[0]["content"], "rewards": rewards}))
    """,
        tmp_path,
    )
    assert result["type"] == "CountdownEnv"
    assert "<answer>" in result["prompt"]
    assert result["rewards"][0] == [1.0, True, False, None]
    value, terminated, truncated, reason = result["rewards"][1]
    assert (value, terminated, truncated) == (0.0, True, False) and "uses numbers not available" in reason


def test_plain_gymnasium_make_after_registry_and_plain_gym_env(installed: Plugin, tmp_path: Path) -> None:
    result, _ = run_python(
        """
        import json
        import gymnasium
        import cascade_envs

        before = "example/Countdown-v0" in gymnasium.registry
        cascade_envs.env_specs()
        countdown = gymnasium.make("example/Countdown-v0")
        countdown.reset(options={"task": {"nums": [3, 5, 2], "target": 16}})
        good = countdown.step("<answer>(3 + 5) * 2</answer>")[1]
        countdown.reset(options={"task": {"nums": [3, 5, 2], "target": 16}})
        bad = countdown.step("<answer>3 * 5 + 2</answer>")[1]
        guess = gymnasium.make("example/GuessNumber-v0")
        guess.reset(seed=0, options={"secret": 42})
        hit = guess.step(42)[1:3]
        small = cascade_envs.make("example/GuessNumber-v0", high=10)  # kwargs override the defaults
        print(json.dumps({
            "before": before, "good": good, "bad": bad, "hit": hit, "high": small.high,
            "plain": not isinstance(guess.unwrapped, cascade_envs.Env),
        }))
    """,
        tmp_path,
    )
    assert result == {"before": False, "good": 1.0, "bad": 0.0, "hit": [1.0, True], "high": 10, "plain": True}


def test_broken_plugins_are_reported_once_and_isolated(
    installed: Plugin, broken_plugins: Path, tmp_path: Path
) -> None:
    result, stderr = run_python(
        """
        import json
        import cascade_envs
        from cascade_envs.plugins.manager import failures

        ids = sorted(cascade_envs.env_specs())
        cascade_envs.env_specs()  # a second access does not rediscover
        errors = {}
        for env_id in ("broken/Hook-v0", "broken/Import-v0"):
            try:
                cascade_envs.make(env_id)
            except cascade_envs.UnknownIdError as exc:
                errors[env_id] = str(exc)
        env = cascade_envs.make("example/Countdown-v0")
        env.reset(options={"task": {"nums": [4, 6], "target": 24}})
        reward = env.step("<answer>4 * 6</answer>")[1]
        cascade_envs.make(PROBE_BUILTIN).reset(seed=0)
        print(json.dumps({
            "ids": ids, "errors": errors, "reward": reward,
            "builtins": sorted(cascade_envs.envs.BUILTIN_ENVS),
            "failures": sorted((f.plugin.name, f.plugin.distribution, f.plugin.version, f.error) for f in failures()),
        }))
    """,
        tmp_path,
        probe=True,
        pythonpath=broken_plugins,
    )
    assert result["failures"] == [
        ["broken-hook", "cascade-envs-broken-hook", "2.0", "ValueError: boom in hook"],
        ["broken-import", "cascade-envs-broken-import", "1.0", "RuntimeError: boom at import"],
    ]
    for name, dist in (
        ("broken-import", "cascade-envs-broken-import"),
        ("broken-hook", "cascade-envs-broken-hook"),
    ):
        reports = [line for line in stderr.splitlines() if f"'{name}'" in line]
        assert len(reports) == 1 and dist in reports[0], stderr  # reported once, with its distribution
    assert "broken/Hook-v0" not in result["ids"]  # a failing hook contributes nothing
    assert set(result["builtins"]) <= set(result["ids"]) and PROBE_BUILTIN in result["ids"]
    assert {"example/Countdown-v0", "example/CountdownTools-v0", "example/GuessNumber-v0"} <= set(
        result["ids"]
    )
    assert result["reward"] == 1.0
    for env_id, message in result["errors"].items():
        assert f"unknown environment '{env_id}'" in message
        assert "failed to load" in message
        assert (
            "broken-hook" in message and "cascade-envs-broken-hook" in message and "boom in hook" in message
        )
        assert "broken-import" in message and "boom at import" in message


@pytest.mark.parametrize("value", ["1", "0"])
def test_disable_autoload_hides_third_party_envs_only(
    installed: Plugin, broken_plugins: Path, tmp_path: Path, value: str
) -> None:
    result, stderr = run_python(
        """
        import json
        import cascade_envs
        from cascade_envs.plugins.manager import failures

        try:
            cascade_envs.make("example/Countdown-v0")
            error = None
        except cascade_envs.UnknownIdError as exc:
            error = str(exc)
        print(json.dumps({"ids": sorted(cascade_envs.env_specs()), "error": error, "failures": len(failures()),
                          "builtins": sorted(cascade_envs.envs.BUILTIN_ENVS)}))
    """,
        tmp_path,
        probe=True,
        pythonpath=broken_plugins,
        disable=value,
    )
    assert set(result["builtins"]) <= set(result["ids"]) and PROBE_BUILTIN in result["ids"]
    if value == "1":
        assert set(result["ids"]) == set(result["builtins"])
        assert "unknown environment 'example/Countdown-v0'" in result["error"]
        assert result["failures"] == 0 and "boom" not in stderr  # third-party code is not even imported
    else:  # "0" means enabled
        assert "example/Countdown-v0" in result["ids"] and result["error"] is None
        assert result["failures"] == 2


def test_uninstall_removes_the_envs(installed: Plugin, tmp_path: Path) -> None:
    installed.uninstall()
    result, _ = run_python(
        """
        import json
        import gymnasium
        import cascade_envs

        messages = {}
        try:
            cascade_envs.make("example/Countdown-v0")
        except cascade_envs.UnknownIdError as exc:
            messages["cascade"] = str(exc)
        try:
            gymnasium.make("cascade_envs.gym:example/Countdown-v0")
        except gymnasium.error.Error as exc:
            messages["gymnasium"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps({"ids": sorted(cascade_envs.env_specs()), "messages": messages}))
    """,
        tmp_path,
    )
    assert not any(env_id.startswith("example/") for env_id in result["ids"])
    assert "unknown environment 'example/Countdown-v0'" in result["messages"]["cascade"]
    assert "example" in result["messages"]["gymnasium"]  # gymnasium: "Namespace example not found"
