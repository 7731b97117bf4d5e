"""The interpreter a task's tests need: the task's or its image's, found once per image, never the agent's.

In the images people train and evaluate on, the repository's interpreter, dependencies and test
tools live in an environment of their own, and the system ``python3`` has none of them:
SWE-bench, SWE-Gym and SWE-smith images keep them in the conda env ``testbed``
(``/opt/miniconda3/envs/testbed``, what SWE-bench's harness activates); R2E-Gym images in a venv
beside the repository (``/testbed/.venv``). The runner (``scripts/``) must run there.

``Interpreters.find(session, task)`` picks, in this order, the first candidate that exists and
imports the task's test framework under ``-I`` (``PROBES``: pytest, unittest, Django's test
package, SymPy; the repository and the task's ``sys.path`` entries on the path):

1. the interpreter the row declares (``python``, ``test_env``, or the one its test command names
   or activates): the only candidate when given;
2. the env's ``python`` setting (``SweEnv(python=...)``): the only candidate when given;
3. the image's: the conda env ``testbed`` under the usual conda roots (``CONDA_ROOTS``), a venv
   beside the repository (``<workdir>/.venv``), then ``python3`` on the sandbox's ``PATH``.

The probe runs in a workspace that no agent has touched: the episode's, at setup, before the
agent's first command, or the clean room before the change is written. So a ``.venv`` (or a
``python3``) the agent makes never becomes the grader's interpreter. The choice is cached per
image (the docker image, or the row's repository elsewhere) and settings for the env's run; when no
candidate has the framework, ``NoInterpreter`` says which were tried and why: a task or image
fault the model cannot cause, so its episodes are masked. A probe that did not finish (a timeout,
a lost sandbox) is no answer: that episode is masked and the next one probes again.
"""

from __future__ import annotations

import asyncio
import posixpath
from dataclasses import dataclass

from cascade_envs.sandbox import SandboxError, Session

from .task import SweTask

CONDA_ROOTS = ("/opt/miniconda3", "/opt/conda", "/root/miniconda3", "/usr/local/miniconda3")
CONDA_ENV = "testbed"
PROBES = {"pytest": "pytest", "unittest": "unittest", "django": "django.test", "sympy": "sympy"}
PROBE = "import sys; sys.path[:0] = sys.argv[2:]; __import__(sys.argv[1])"
PROBE_TIMEOUT_S = 120.0
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


class NoInterpreter(SandboxError):
    """No candidate interpreter can import the task's test framework: the task's or image's fault."""


@dataclass(frozen=True)
class Interpreter:
    """The interpreter the runner runs under, and the ``PATH`` its tests see (its own ``bin`` first)."""

    path: str

    @property
    def env_path(self) -> str:
        folder = posixpath.dirname(self.path)
        return f"{folder}:{SYSTEM_PATH}" if folder and folder not in SYSTEM_PATH.split(":") else SYSTEM_PATH


def candidates(task: SweTask, python: str | None = None) -> tuple[str, ...]:
    """Where ``task``'s interpreter may be, in the order tried (the module docstring)."""
    if task.python:
        return (task.python,)
    if python:
        return (python,)
    conda = tuple(f"{root}/envs/{CONDA_ENV}/bin/python" for root in CONDA_ROOTS)
    return (*conda, posixpath.join(task.workdir, ".venv", "bin", "python"), "python3")


class Interpreters:
    """The interpreters found for an env's run, one probe per image and settings (``find``)."""

    def __init__(self, python: str | None = None):
        self.python = python
        self._found: dict[tuple[object, ...], Interpreter | NoInterpreter] = {}
        self._locks: dict[tuple[object, ...], asyncio.Lock] = {}

    def key(self, task: SweTask) -> tuple[object, ...]:
        """What the choice depends on: the image (or the row's own repository) and the settings."""
        where = task.image or task.source or task.instance_id
        return (where, task.workdir, task.framework, task.test_paths, candidates(task, self.python))

    async def find(self, session: Session, task: SweTask) -> Interpreter:
        """The task's interpreter, probed in ``session`` (untouched by the agent) unless known for its image;
        ``NoInterpreter`` when there is none, ``SandboxError`` when the session fails."""
        key = self.key(task)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key not in self._found:
                self._found[key] = await probe(session, task, candidates(task, self.python))
        found = self._found[key]
        if isinstance(found, NoInterpreter):
            raise NoInterpreter(str(found))
        return found


async def probe(session: Session, task: SweTask, tried: tuple[str, ...]) -> Interpreter | NoInterpreter:
    """The first of ``tried`` that imports the task's framework in ``session``, or why none does."""
    module = PROBES[task.framework]
    reasons = []
    for path in tried:
        done = await session.arun(
            [path, "-I", "-B", "-c", PROBE, module, session.workdir, *task.test_paths],
            timeout_s=PROBE_TIMEOUT_S,
            env={"PATH": SYSTEM_PATH, "HOME": "/tmp", "LANG": "C.UTF-8"},
        )
        if session.lost or done.killed_by is not None:  # no answer: masked now, probed again later
            raise SandboxError(f"probing the interpreter {path} did not finish: {done.describe()}")
        if done.ok:
            return Interpreter(path)
        tail = (done.stderr.decode(errors="replace").strip().splitlines() or [done.describe()])[-1]
        reasons.append(f"{path}: {tail[:160]}")
    where = f"image {task.image}" if task.image else "the task's workspace"
    return NoInterpreter(
        f"no interpreter in {where} can run the task's {task.framework} tests (a task or image fault, "
        f"not the model's): {'; '.join(reasons)}"
    )
