import os
import shutil
import sys
import tempfile
from pathlib import Path

# One torch thread per test worker: with `-n 2` on 2 cores, more threads only oversubscribe them
# (measured 5-10x slower). Set before any test module imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))


def pytest_configure(config: pytest.Config) -> None:
    """Where a Docker daemon answers, make sure the docker tests' images exist (once, before any worker starts)."""
    if not hasattr(config, "workerinput"):
        from tests import docker_support

        docker_support.prepare(log=lambda message: print(message, file=sys.stderr, flush=True))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The reference data folder (../shared/data); tests that need it skip loudly without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session", autouse=True)
def _toy_envs():
    from tests.toy_envs import register_toy_envs

    register_toy_envs()


@pytest.fixture
def chat_server():
    """A local chat-completions server answering as the request's model says (tests/chat_server.py)."""
    from tests.chat_server import ScriptedChatServer, by_model

    with ScriptedChatServer(by_model(), models=("echo-answer",)) as server:
        yield server


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def private_tempdir(monkeypatch):
    """A fresh temp dir as ``tempfile.tempdir`` (sticky and world-writable like /tmp, for sandbox uids):
    what a test creates there is its own, even with other tests making workspaces in parallel."""
    folder = tempfile.mkdtemp(prefix="cascade-test-tmp-")
    os.chmod(folder, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", folder)
    yield Path(folder)
    shutil.rmtree(folder, ignore_errors=True)
