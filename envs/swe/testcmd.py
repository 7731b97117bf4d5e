"""A row's test command, read for what the trusted runner needs; never run as written.

SWE rows say how their tests run in a shell command: SWE-smith's ``test_cmd``, the test line of
SWE-bench 5's ``eval_script``, a project's own ``PYTHONPATH=_vendor python3 -m pytest ...``. The
grader does not run it (its output is text the code under test can forge); ``read_command`` takes
from it what the runner must reproduce:

- the runner: ``pytest`` (``pytest``, ``py.test``, ``python -m pytest``, ``tox ... --`` as Sphinx's
  ``tox --current-env``), ``unittest`` (``python -m unittest``), ``django`` (``tests/runtests.py``,
  whose options, e.g. ``--settings=test_sqlite --parallel 1``, are kept) or ``sympy``
  (``bin/test``; ``-C`` turns SymPy's cache off as it does there);
- the interpreter it names by path (``.venv/bin/python``, an absolute path; ``.venv/bin/pytest``
  names ``.venv/bin/python``; a bare ``python3`` is whatever ``PATH`` finds, so names none), or the conda env it activates (``source /opt/miniconda3/bin/activate;
  conda activate testbed``);
- its environment: ``NAME=value`` before the program and ``export NAME=value`` segments;
  ``PYTHONPATH`` becomes ``sys.path`` entries and ``PYTHONWARNINGS`` (with ``-W``) warning filters,
  which the runner applies itself (it runs ``python -I``, which ignores ``PYTHON*`` variables);
  other ``PYTHON*`` variables are dropped;
- its positional arguments (test files, Django labels): what to run when the row says no more.

Wrappers (``xvfb-run``, ``timeout``, ``env``) and the other pytest options are skipped.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field

from cascade_envs.core import TaskError

ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
PYTHON = re.compile(r"^python[0-9.]*$")
WRAPPERS = ("xvfb-run", "timeout", "env", "nice", "stdbuf")
SEPARATORS = (";", "&&", "||", "|", "&", "\n")
PYTHON_OPTIONS_WITH_VALUE = ("-W", "-X", "-m", "-c")


@dataclass(frozen=True)
class TestCommand:
    """What a test command declares (see the module docstring)."""

    framework: str | None = None
    python: str | None = None
    conda: tuple[str, str] | None = None
    """``(conda root, env name)`` the command activates."""
    env: dict[str, str] = field(default_factory=dict)
    paths: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    """The runner's own options (kept for Django's ``runtests.py``)."""
    targets: tuple[str, ...] = ()


def read_command(command: str, field_name: str = "test_cmd") -> TestCommand:
    """Read ``command``; ``TaskError`` on ``field_name`` when it cannot be split into words."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lexer.whitespace = " \t\r"
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError as exc:
        raise TaskError(f"cannot read the test command: {exc}", field_name) from None
    env: dict[str, str] = {}
    conda_root = conda_env = None
    found = TestCommand()
    for segment in _segments(words):
        head = segment[0]
        if head in ("source", ".") and len(segment) > 1 and segment[1].endswith("/bin/activate"):
            conda_root = posixpath.dirname(posixpath.dirname(segment[1]))
        elif head == "conda" and segment[1:2] == ["activate"] and len(segment) > 2:
            conda_env = segment[2]
        elif head == "export":
            env.update(_assignments(segment[1:]))
        else:
            runner = _runner(segment)
            if runner.framework is not None or found.framework is None:
                found = runner
    conda = (conda_root or "/opt/miniconda3", conda_env) if conda_env else None
    env = {**env, **found.env}
    paths = tuple(p for p in env.pop("PYTHONPATH", "").split(":") if p)
    warnings = tuple(w for w in env.pop("PYTHONWARNINGS", "").split(",") if w) + found.warnings
    env = {k: v for k, v in env.items() if not k.startswith("PYTHON")}
    return TestCommand(
        found.framework, found.python, conda, env, paths, warnings, found.options, found.targets
    )


def _segments(words: list[str]) -> list[list[str]]:
    segments: list[list[str]] = [[]]
    for word in words:
        if word in SEPARATORS or set(word) <= set(";&|"):
            segments.append([])
        else:
            segments[-1].append(word)
    return [s for s in segments if s]


def _assignments(words: list[str]) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in map(ASSIGNMENT.match, words) if m}


def _runner(words: list[str]) -> TestCommand:
    """The runner one simple command starts (``framework`` ``None`` when it starts none we know)."""
    at, env = 0, {}
    while at < len(words) and ASSIGNMENT.match(words[at]):
        env.update(_assignments([words[at]]))
        at += 1
    while at < len(words) and posixpath.basename(words[at]) in WRAPPERS:
        at += 1
        while at < len(words) and (words[at].startswith("-") or words[at].isdigit()):
            at += 1
    if at >= len(words):
        return TestCommand(env=env)
    program, rest = words[at], words[at + 1 :]
    name = posixpath.basename(program)
    python: str | None = None
    warnings: list[str] = []
    if PYTHON.match(name):
        python = program if "/" in program else None  # a bare name is whatever PATH finds: not a declaration
        program, rest, warnings = _python_args(rest)
        name = posixpath.basename(program)
    elif name in ("pytest", "py.test") and "/" in program:
        python = posixpath.join(posixpath.dirname(program), "python")
    if name in ("pytest", "py.test", "-m pytest", "tox"):
        framework = "pytest"
        rest = rest[rest.index("--") + 1 :] if name == "tox" and "--" in rest else rest
    elif name == "-m unittest":
        framework = "unittest"
    elif name == "runtests.py":
        framework = "django"
    elif program.endswith("bin/test"):
        framework = "sympy"
        if "-C" in rest or "--no-cache" in rest:
            env["SYMPY_USE_CACHE"] = "no"
    else:
        return TestCommand(python=python, env=env, warnings=tuple(warnings))
    options, targets = _split(rest, framework)
    return TestCommand(framework, python, None, env, (), tuple(warnings), options, targets)


def _python_args(words: list[str]) -> tuple[str, list[str], list[str]]:
    """``(program, its arguments, warning filters)`` after ``python``: ``-m X`` is the program ``-m X``."""
    warnings: list[str] = []
    at = 0
    while at < len(words) and words[at].startswith("-"):
        option = words[at]
        if option in PYTHON_OPTIONS_WITH_VALUE and at + 1 < len(words):
            if option == "-m":
                return f"-m {words[at + 1]}", words[at + 2 :], warnings
            if option == "-W":
                warnings.append(words[at + 1])
            at += 2
        else:
            if option.startswith("-W") and len(option) > 2:
                warnings.append(option[2:])
            at += 1
    return (words[at], words[at + 1 :], warnings) if at < len(words) else ("", [], warnings)


def _split(words: list[str], framework: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(options, positional arguments)``; only Django's options are kept (its ``runtests.py`` reads them)."""
    options: list[str] = []
    targets: list[str] = []
    valued = ("--settings", "--parallel", "--verbosity", "-v") if framework == "django" else ()
    at = 0
    while at < len(words):
        word = words[at]
        if word.startswith("-"):
            if word in valued and at + 1 < len(words):
                options += words[at : at + 2]
                at += 2
                continue
            if framework == "django":
                options.append(word)
            elif word in ("-p", "-k", "-m", "-o", "-c", "--rootdir") and at + 1 < len(words):
                at += 1  # pytest's valued options: their value is not a target
        else:
            targets.append(word)
        at += 1
    return tuple(options), tuple(targets)
