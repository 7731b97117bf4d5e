"""The trusted test runner: runs a task's tests and reports each outcome.

Started in the clean-room workspace (cwd: the repository) as the program ``scripts/__init__.py``
builds (``supervisor.py``, ``kernel.py``, ``hook.py``, ``guard.py``, ``drivers.py``, then this file)
under the task's interpreter (``<python> -I -B -c``), with a
JSON request on stdin::

    {"nonce": str, "framework": "unittest" | "pytest" | "django" | "sympy", "tests": [test ids],
     "files": [what to run: pytest paths, Django labels, SymPy test files],
     "agent_paths": [files the agent's change wrote], "paths": [sys.path entries the task declares],
     "env": {variables the task declares}, "warnings": [warning filters], "options": [runner options],
     "legacy": bool (grade on Python < 3.8, without the audit hook), "defences_off": [names, tests only]}

Drivers (``DRIVERS``): ``unittest`` loads the ids; ``pytest`` runs the files; ``django`` runs the
repository's own ``tests/runtests.py`` with its options and labels, its suite run by this runner
and each test reported in the row's id format; ``sympy`` runs the test functions of the files as
SymPy's ``bin/test`` does. ``env``, ``paths`` and ``warnings`` are applied here, before any
repository code is imported (``-I`` ignores ``PYTHON*`` variables).

The kernel forks a supervisor that alone writes the host's channel (``<nonce> <json>`` lines:
``begin``, one ``{"test": id, "status": PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS, "detail": ...}``
per test, ``collect_error``, ``tampered``, ``refused``, ``crash``, ``end``), and guards this
process with an audit hook before any repository code is imported (``kernel.py`` says what it
refuses); ``guard.py`` says how outcomes are kept and what is checked. Results never come from text
the tests print.

``sys.path`` is the standard library first, then the repository, then site-packages (kept so
before every test). Once the framework is imported, ``sys.pycache_prefix`` points at an empty
directory, so no bytecode in the tree's ``__pycache__`` folders is ever loaded.

What is not defended: code that corrupts the interpreter itself (a memory-safety bug of CPython or
of a C extension), and a test framework that is itself the agent's code (pytest's own repository).
"""

import contextlib
import importlib
import os
import sys

from .drivers import DRIVERS, _part_executor
from .guard import (
    CLASSES_ONLY,
    FRAMEWORK_MODULES,
    RUNNER_MODULES,
    Guard,
    Outcomes,
    _guard,
    _stdlib_first,
    use_kernel,
)
from .hook import install
from .kernel import Kernel, clean
from .supervisor import start


def _trusted_code():
    """The code objects of this program (and of what started it), for the kernel to tell its own."""
    found, frame = {}, sys._getframe()
    todo = []
    while frame is not None:
        todo.append(frame.f_code)
        frame = frame.f_back
    while todo:
        code = todo.pop()
        if id(code) not in found and type(code) is type(_trusted_code.__code__):
            found[id(code)] = code
            todo.extend(code.co_consts)
    return list(found.values())


def _declared(request, root):
    """Apply what the task declares for its tests: variables, ``sys.path`` entries (after the standard
    library, before the repository), warning filters (what ``PYTHONPATH``/``PYTHONWARNINGS`` would do)."""
    import warnings

    os.environ.update(request.get("env") or {})
    extra = [os.path.join(root, p) for p in request.get("paths") or ()]  # relative to the repository
    extra = [p for p in extra if p not in sys.path]
    at = sys.path.index(root) if root in sys.path else len(sys.path)
    sys.path[at:at] = extra
    for spec in request.get("warnings") or ():
        with contextlib.suppress(Exception):  # a filter whose category does not import: ignored, as -W does
            warnings._setoption(spec)


def main():
    request, reporter = start()
    root = os.path.realpath(os.getcwd())
    agent_paths = frozenset(request.get("agent_paths") or ())
    off = frozenset(request.get("defences_off") or ())
    kernel = Kernel(reporter, root, agent_paths, off)
    use_kernel(kernel)
    try:
        if sys.version_info < (3, 8) and not request.get("legacy"):
            kernel.report(
                {
                    "unsupported": "Python %d.%d has no audit hooks, so code under test could reach the "
                    "verdict: grade such tasks with legacy_python=True (weaker checks)" % sys.version_info[:2]
                }
            )
            os._exit(0)
        sys.path[:] = _stdlib_first(root)
        _declared(request, root)
        sys.dont_write_bytecode = True
        os.makedirs(os.environ.get("HOME") or "/tmp/cascade-home", exist_ok=True)
        install(kernel, _trusted_code())
        framework = FRAMEWORK_MODULES[request["framework"]]
        for name in framework:  # pytest loads some of them only once it is configured
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        if request["framework"] in ("unittest", "django") and "outcomes" not in off:
            import unittest.case

            unittest.case._Outcome.testPartExecutor = _part_executor(unittest.case._Outcome.testPartExecutor)
        sys.pycache_prefix = os.path.join(os.environ.get("HOME") or "/tmp", ".pycache")
        kernel.keep("root", root)
        kernel.keep("outcomes", Outcomes(strict="outcomes" not in off))
        kernel.keep("guard", Guard(root, agent_paths, active="guard" not in off))
        if "guard" not in off:
            watched = [
                (name, sys.modules[name], False) for name in framework + RUNNER_MODULES if name in sys.modules
            ]
            watched += [
                (name + ".classes", sys.modules[name], None) for name in CLASSES_ONLY if name in sys.modules
            ]
            kernel.baseline([*watched, ("runner", globals(), True), ("kernel", vars(kernel), True)])
        DRIVERS[request["framework"]](request, root)
        _guard().finish()
        kernel.finish(len(kernel.state("outcomes").sent))
    except BaseException:
        import traceback

        kernel.report({"crash": clean(traceback.format_exc(), 1000)})
    os._exit(0)


if __name__ == "cascade_runner":
    main()
