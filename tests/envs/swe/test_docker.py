"""``cascade/SWE-v0`` on docker: per-instance images, rows that name their own image, test dependencies
baked in, and the ways a container can fail (image missing, daemon down or stopped mid-episode): each a
masked episode with its reason, never a 0, never a container left behind.

The episodes themselves (fix → 1, no fix → 0, setup failure → masked, bad input, nothing left) run on
docker in ``test_swe_env.py`` and the attack suite in ``test_attacks.py``. Needs the OpenHands SDK (``.ci/swe.sh``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import tempfile
import threading
import time
from pathlib import Path

import pytest

from cascade_envs.envs.swe.grading import open_workspace
from cascade_envs.envs.swe.images import build_images, image_for
from cascade_envs.envs.swe.task import read_task
from cascade_envs.sandbox import images
from cascade_envs.sandbox.docker import DockerSandbox
from tests import docker_support

from .conftest import LIMITS, bundled_rows, call, fix_calls, row, swe_sandbox

if importlib.util.find_spec("openhands") is None or importlib.util.find_spec("openhands.tools") is None:
    pytest.skip(
        "the OpenHands SDK is not installed (it needs Python >= 3.12): run .ci/swe.sh",
        allow_module_level=True,
    )

from cascade_envs.envs.swe.env import SweEnv
from tests.envs.swe.test_swe_env import FINISH, play


def test_bundled_rows_run_in_their_per_instance_images():
    sandbox = swe_sandbox("docker", bundled_rows())
    names = [image_for(read_task(r)) for r in bundled_rows()]
    assert all(n.startswith(images.SWE_IMAGE_PREFIX) for n in names) and len(set(names)) == 2
    changed = {
        **row("durations"),
        "install_cmd": "true",
    }  # another image: its hash covers the install command
    assert image_for(read_task(changed)) not in names
    assert sandbox.name == "docker"


def test_a_row_that_names_its_image_runs_in_it():
    sandbox = swe_sandbox("docker", [row("durations")])
    task = read_task(row("durations"))
    files = {path: (text.encode(), 0o644) for path, text in (task.files or {}).items()}
    own = images.build_tree(
        images.client(),
        images.SWE_BASE_IMAGE,
        "cascade-test-own-image:1",
        files,
        "/testbed",
        key="own-image-1",
    )
    named = {**row("durations"), "image": own, "repo_snapshot": None}
    env = SweEnv(sandbox=sandbox, command_timeout_s=10, test_timeout_s=60)
    try:
        (fixed,) = play(env, [named], [*fix_calls("durations"), FINISH])
        (unfixed,) = play(env, [named], [FINISH])
    finally:
        env.close()
    assert fixed.reward.value == 1.0, fixed.reward
    assert unfixed.reward.value == 0.0 and not unfixed.reward.masked, unfixed.reward


def test_install_cmd_bakes_test_dependencies_into_the_image(tmp_path):
    swe_sandbox("docker")
    (tmp_path / "app.py").write_text("from extdep import ANSWER\n")
    install = (
        "d=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])') && mkdir -p $d && "
        "echo 'ANSWER = 42' > $d/extdep.py"
    )
    task = read_task(
        {
            **row("durations"),
            "repo_snapshot": str(tmp_path),
            "install_cmd": install,
            "instance_id": "test__extdep-1",
        }
    )
    (name,) = build_images([task], images.client(), log=lambda message: None)
    assert name == image_for(task)

    async def go():
        session = await open_workspace(DockerSandbox(workdir_mb=300, **LIMITS), task, check_patch=False)
        async with session:
            return await session.arun(
                ["sh", "-c", "python3 -c 'import app; print(app.ANSWER)'; df -m . | tail -1"]
            )

    result = asyncio.run(go())
    assert result.ok and result.text.split("\n")[0] == "42", result
    assert result.text.split("\n")[1].split()[1] == "300", (
        result
    )  # the sandbox's workdir_mb caps the workspace


def test_a_missing_image_masks_the_episode_naming_the_command_that_builds_it():
    sandbox = swe_sandbox("docker")
    env = SweEnv(sandbox=sandbox, command_timeout_s=10)
    unbuilt = {**row("durations"), "install_cmd": "echo never built"}
    try:
        (episode,) = play(env, [unbuilt], [FINISH])
    finally:
        env.close()
    assert episode.reward.masked and image_for(read_task(unbuilt)) in episode.reward.error
    assert "cascade-envs build-image swe --tasks" in episode.reward.error, episode.reward


def test_a_daemon_that_is_down_masks_the_episode():
    swe_sandbox("docker")
    env = SweEnv(sandbox=DockerSandbox(base_url="unix:///nonexistent/docker.sock", api_timeout_s=5, **LIMITS))
    start = time.monotonic()
    try:
        (episode,) = play(env, [row("durations")], [FINISH])
    finally:
        env.close()
    assert episode.reward.masked and "no Docker daemon reachable" in episode.reward.error, episode.reward
    assert time.monotonic() - start < 30


def test_a_daemon_stopped_mid_episode_masks_it_and_leaves_no_container():
    swe_sandbox("docker")
    daemon = docker_support.PrivateDaemon(Path(tempfile.mkdtemp(prefix="cd-")), kind="swe-base")
    try:
        daemon.start()
        build_images([read_task(row("durations"))], images.client(daemon.url), log=lambda message: None)
        env = SweEnv(sandbox=DockerSandbox(base_url=daemon.url, **LIMITS), command_timeout_s=30)
        stopper = threading.Timer(4.0, daemon.stop)
        stopper.start()
        try:
            (episode,) = play(
                env,
                [row("durations")],
                [call("terminal", command="ls"), call("terminal", command="sleep 25", timeout=30), FINISH],
            )
        finally:
            stopper.join()
            env.close()
        assert episode.reward.masked and "lost" in episode.reward.error, episode.reward
        daemon.start()
        assert daemon.containers() == []
    finally:
        daemon.close()
