"""The trusted test runner: runs a task's tests and reports each outcome.

Started in the clean-room workspace (cwd: the repository) as ``<the task's python> -I -B -c <this>``
with a JSON request on stdin::

    {"nonce": str, "framework": "unittest" | "pytest" | "django" | "sympy", "tests": [test ids],
     "files": [what to run: pytest paths, Django labels, SymPy test files],
     "agent_paths": [files the agent's change wrote], "paths": [sys.path entries the task declares],
     "env": {variables the task declares}, "warnings": [warning filters], "options": [runner options]}

Drivers (``DRIVERS``): ``unittest`` loads the ids; ``pytest`` runs the files; ``django`` runs the
repository's own ``tests/runtests.py`` with its options and labels, its suite run by this runner
and each test reported in the row's id format; ``sympy`` runs the test functions of the files as
SymPy's ``bin/test`` does. ``env``, ``paths`` and ``warnings`` are applied here, before any
repository code is imported (``-I`` ignores ``PYTHON*`` variables).

Results do not come from text the tests print. Before any repository code is imported, the
runner moves its stdout to a private descriptor and points fds 1 and 2 at ``/dev/null``; on the
private one it writes one line per event, ``<nonce> <json>``: ``{"begin": ...}``, one
``{"test": id, "status": PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS, "detail": ...}`` per test as
it ends, ``{"collect_error": ...}``, ``{"tampered": [reasons]}``, ``{"crash": traceback}`` and a
final ``{"end": ...}``. The host accepts the run only when every line carries the nonce, ``begin``
comes first and ``end`` last, and no test is reported twice (so a forged record cannot stand
beside the real one).

``sys.path`` is the standard library first, then the repository, then site-packages (kept so
before every test: a test directory that pytest prepends cannot shadow the standard library).
Once the framework is imported, ``sys.pycache_prefix`` points at an empty directory, so no
bytecode in the tree's ``__pycache__`` folders is ever loaded.

The code under test runs in this process, so ``Guard`` checks, around every test and at the end,
that it left the verdict machinery alone; a run that fails a check is reported ``tampered``:

- the functions and methods of unittest's and pytest's running and reporting modules, of
  ``builtins`` and of the runner's own result channel are the objects (and code) they were;
- no pytest plugin, trace or profile function, import hook (``sys.meta_path``,
  ``sys.path_hooks``) comes from a file of the agent's change, nor is a function without a file;
- no test class from such a file redefines how a test runs, and each test's function is the
  one that was loaded, from the test's own file;
- no class from such a file compares equal to objects it has never seen (an ``__eq__`` that
  always says yes turns every ``assertEqual`` into a pass).

These stop the generic ways of rewriting a verdict, not an adversary that edits the runner's
own memory.
"""

import contextlib
import gc
import importlib
import json
import os
import sys

RUN_METHODS = (
    "run",
    "__call__",
    "debug",
    "_callTestMethod",
    "_callSetUp",
    "_callTearDown",
    "_callCleanup",
    "doCleanups",
    "defaultTestResult",
    "_addSkip",
    "_feedErrorsToResult",
    "runtest",
    "_prunetraceback",
)
UNITTEST_MODULES = (
    "unittest.case",
    "unittest.result",
    "unittest.suite",
    "unittest.loader",
    "unittest.util",
    "builtins",
)
PYTEST_MODULES = (
    "_pytest.runner",
    "_pytest.reports",
    "_pytest.python",
    "_pytest.main",
    "_pytest.skipping",
    "_pytest.outcomes",
    "_pytest.unittest",
    "_pytest.nodes",
    "_pytest.fixtures",
    "_pytest.config",
    "_pytest.terminal",
    "pluggy._callers",
    "pluggy._hooks",
    "pluggy._manager",
    "pluggy.callers",
    "pluggy.hooks",
    "pluggy.manager",
    "builtins",
)
MAX_DETAIL = 300


def _stdlib_first(root):
    """sys.path as: the standard library, the repository, then site-packages (and anything else)."""
    paths = [p for p in sys.path if p not in ("", ".", root, os.getcwd())]
    sites = [p for p in paths if "site-packages" in p or "dist-packages" in p]
    stdlib = [p for p in paths if p not in sites]
    return [*stdlib, root, *sites]


def _fingerprint(modules):
    """``{name: (object id, code id)}`` of every function and class method defined in ``modules``."""
    out = {}
    for module_name in modules:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name, value in list(vars(module).items()):
            key = module_name + "." + name
            if isinstance(value, type) and (value.__module__ == module_name or module_name == "builtins"):
                for attr, member in list(vars(value).items()):
                    func = getattr(member, "__func__", member)
                    if callable(func) or isinstance(member, property):
                        out[key + "." + attr] = (id(member), id(getattr(func, "__code__", None)))
            elif callable(value):
                out[key] = (id(value), id(getattr(value, "__code__", None)))
    return out


def _origin(obj):
    """The file ``obj``'s code comes from: a function's module (its globals), a module's, or its class's."""
    func = getattr(obj, "__func__", obj)
    scope = getattr(func, "__globals__", None)
    if scope is not None:
        return scope.get("__file__") or "<code without a file>"
    if isinstance(obj, type(sys)):
        return getattr(obj, "__file__", None)
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(sys.modules.get(getattr(cls, "__module__", "") or ""), "__file__", None)


class Guard:
    """Checks that the code under test left the verdict machinery alone (see the module docstring)."""

    def __init__(self, root, agent_paths, modules, extra=()):
        self.root, self.agent_paths, self.modules = root, agent_paths, modules
        self.before = _fingerprint(modules)
        self.extra = [(name, obj, self._marks(obj)) for name, obj in extra]
        self.tests = {}
        self.reasons = []
        self.known_hooks = {id(hook) for _, hook in self._hooks()}

    @staticmethod
    def _marks(obj):
        members = [(k, v) for k, v in vars(obj).items() if k != "reported"]
        return sorted((k, id(v), id(getattr(v, "__code__", None))) for k, v in members)

    @staticmethod
    def _hooks():
        hooks = [("a trace function", sys.gettrace()), ("a profile function", sys.getprofile())]
        return [(what, h) for what, h in hooks if h is not None] + [
            ("an import hook", h) for h in [*sys.meta_path, *sys.path_hooks]
        ]

    def agent_file(self, obj):
        """The agent-written file ``obj``'s code comes from (or a marker for code without a file), or ``None``."""
        path = _origin(obj)
        if path == "<code without a file>":
            return path
        if not path:
            return None
        rel = os.path.relpath(os.path.realpath(path), self.root)
        return rel if rel in self.agent_paths else None

    def flag(self, reason):
        if reason not in self.reasons:
            self.reasons.append(reason)

    def hooks(self):
        """New trace, profile and import hooks from the agent's files or without one (around every test)."""
        for what, hook in self._hooks():
            where = id(hook) not in self.known_hooks and self.agent_file(hook)
            if where:
                self.flag(f"{what} from {where} was installed")

    def loaded(self, test_id, func, cls=None):
        """A test was loaded: remember its function; its class must not redefine how a test runs."""
        func = getattr(func, "__func__", func)
        self.tests[test_id] = func
        where = func is not None and self.agent_file(func)
        if where:
            self.flag(f"test {test_id} runs code from {where}")
        for klass in getattr(cls, "__mro__", ()):
            where = self.agent_file(klass)
            if where and any(name in vars(klass) for name in RUN_METHODS):
                self.flag(f"test class {klass.__name__} from {where} redefines how a test runs")

    def finish(self, current):
        """Every reason the run cannot be trusted; ``current(test_id)`` gives a test's function now."""
        self.hooks()
        after = _fingerprint(self.modules)
        for name in sorted(set(self.before) | set(after)):
            if after.get(name) != self.before.get(name):
                self.flag("changed: " + name)
        for name, obj, marks in self.extra:
            if self._marks(obj) != marks:
                self.flag(f"the runner's {name} was changed")
        for test_id, func in self.tests.items():
            now = current(test_id)
            if getattr(now, "__func__", now) is not func:
                self.flag(f"test {test_id} was replaced while it ran")
        self.always_equal()
        return self.reasons[:20]

    def always_equal(self):
        """Classes from the agent's files whose ``__eq__`` says yes to objects they have never seen."""
        probes = (object(), {"cascade-probe": object()}, [object()], "cascade-probe", -7.25)
        for cls in [o for o in gc.get_objects() if isinstance(o, type) and "__eq__" in vars(o)]:
            where = self.agent_file(cls)
            if not where:
                continue
            try:
                instance = cls.__new__(cls)
            except Exception:
                instance = object.__new__(cls) if cls.__new__ is object.__new__ else None
            with contextlib.suppress(Exception):
                if instance is not None and all(vars(cls)["__eq__"](instance, p) is True for p in probes):
                    self.flag(f"class {cls.__name__} from {where} compares equal to anything")


class Channel:
    """The private result channel: one ``<nonce> <json>`` line per event."""

    def __init__(self, nonce):
        self.fd, self.nonce, self.write = os.dup(1), nonce, os.write
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        self.reported = 0

    def emit(self, record):
        data = (self.nonce + " " + json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
        while data:
            data = data[self.write(self.fd, data) :]

    def test(self, test_id, status, detail=""):
        self.reported += 1
        self.emit({"test": test_id, "status": status, "detail": detail[-MAX_DETAIL:]})


def _detail(err):
    if not err:
        return ""
    kind, value = err[0], err[1]
    first = (str(value).strip().splitlines() or [""])[0]
    return getattr(kind, "__name__", str(kind)) + (": " + first if first else "")


def run_unittest(request, channel, guard_for, root):
    import unittest

    statuses, loaded = {}, {}

    class Recorder(unittest.TestResult):
        def _set(self, test, status, err=None):
            statuses.setdefault(test.id(), (status, _detail(err)))

        def startTest(self, test):
            sys.path[:] = _stdlib_first(root)
            guard.hooks()
            super().startTest(test)

        def addSuccess(self, test):
            self._set(test, "PASSED")

        def addFailure(self, test, err):
            self._set(test, "FAILED", err)

        def addError(self, test, err):
            if not isinstance(test, unittest.TestCase):  # a class or module fixture failed
                channel.emit({"collect_error": str(test), "detail": _detail(err)})
            self._set(test, "ERROR", err)

        def addSkip(self, test, reason):
            self._set(test, "SKIPPED", (type("Skipped", (), {}), reason))

        def addExpectedFailure(self, test, err):
            self._set(test, "XFAIL", err)

        def addUnexpectedSuccess(self, test):
            self._set(test, "XPASS")

        def addSubTest(self, test, subtest, err):
            if err is not None:
                self._set(test, "FAILED" if issubclass(err[0], test.failureException) else "ERROR", err)

        def stopTest(self, test):
            super().stopTest(test)
            guard.hooks()
            status, detail = statuses.get(test.id(), ("ERROR", "the test reported no outcome"))
            channel.test(test.id(), status, detail)

    guard = guard_for(UNITTEST_MODULES, [("result class", Recorder)])
    channel.emit({"begin": "unittest"})
    loader, suite = unittest.TestLoader(), unittest.TestSuite()
    for test_id in request["tests"]:
        try:
            tests = list(_flatten(loader.loadTestsFromName(test_id)))
        except Exception:  # the module (or what it imports) raised: the test cannot run
            channel.test(test_id, "ERROR", _detail(sys.exc_info()))
            continue
        failed = [t for t in tests if type(t).__name__ == "_FailedTest"]  # could not be imported or found
        if failed:
            channel.test(test_id, "ERROR", str(getattr(failed[0], "_exception", ""))[:MAX_DETAIL])
            continue
        for test in tests:
            if test.id() not in loaded:
                loaded[test.id()] = test
                guard.loaded(test.id(), getattr(type(test), test._testMethodName, None), type(test))
                suite.addTest(test)
    suite.run(Recorder())
    return guard.finish(lambda test_id: getattr(type(loaded[test_id]), loaded[test_id]._testMethodName, None))


def _flatten(suite):
    for item in suite:
        if hasattr(item, "__iter__"):
            yield from _flatten(item)
        else:
            yield item


def run_pytest(request, channel, guard_for, root):
    import pytest

    state, items = {}, {}

    class Recorder:
        def pytest_collectreport(self, report):
            if report.failed:
                channel.emit({"collect_error": report.nodeid, "detail": str(report.longrepr)[-MAX_DETAIL:]})

        def pytest_collection_finish(self, session):
            for item in session.items:
                items[item.nodeid] = item
                guard.loaded(item.nodeid, getattr(item, "obj", None), getattr(item, "cls", None))

        def pytest_runtest_setup(self, item):
            sys.path[:] = _stdlib_first(root)
            guard.hooks()

        def pytest_runtest_logreport(self, report):
            xfail, outcome = hasattr(report, "wasxfail"), report.outcome
            if report.when == "call" or (report.when == "setup" and outcome != "passed"):
                if outcome == "passed":
                    status = "XPASS" if xfail else "PASSED"
                elif outcome == "skipped":
                    status = "XFAIL" if xfail else "SKIPPED"
                else:
                    status = "FAILED" if report.when == "call" else "ERROR"
                state[report.nodeid] = (status, str(report.longrepr or "")[-MAX_DETAIL:])
            elif report.when == "teardown" and outcome == "failed":
                state[report.nodeid] = ("ERROR", str(report.longrepr or "")[-MAX_DETAIL:])

        def pytest_runtest_logfinish(self, nodeid, location):
            guard.hooks()
            status, detail = state.get(nodeid, ("ERROR", "the test reported no outcome"))
            channel.test(nodeid, status, detail)

        def pytest_unconfigure(self, config):
            for name, plugin in config.pluginmanager.list_name_plugin():
                where = guard.agent_file(plugin)
                if where and where != "<code without a file>":
                    guard.flag(f"a pytest plugin from {where} was registered ({name})")

    for name in PYTEST_MODULES:  # pytest loads some of them only once it is configured
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    guard = guard_for(PYTEST_MODULES, [("result plugin", Recorder)])
    channel.emit({"begin": "pytest " + pytest.__version__})
    pytest.main(["-p", "no:cacheprovider", "-q", "--rootdir", root, *request["files"]], plugins=[Recorder()])
    return guard.finish(lambda nodeid: getattr(items[nodeid], "obj", None))


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


def _django_id(test, wanted, reported):
    """The id a Django row gives ``test``: ``name (module.Class)``, ``name (module.Class.name)`` (3.11+),
    its docstring's first line (what Django's verbose log shows then), or unittest's id."""
    name = getattr(test, "_testMethodName", "")
    cls = f"{type(test).__module__}.{type(test).__qualname__}"
    doc = test.shortDescription() if hasattr(test, "shortDescription") else None
    for candidate in (f"{name} ({cls})", f"{name} ({cls}.{name})", doc, test.id()):
        if candidate and candidate in wanted and candidate not in reported:
            return candidate
    return test.id()


def run_django(request, channel, guard_for, root):
    """Django's own ``tests/runtests.py`` (its settings module, apps, databases and options, e.g.
    ``--settings=test_sqlite --parallel 1``) runs the labels, as SWE-bench runs it; its test runner's
    ``run_suite`` is this runner's, so the suite runtests.py builds runs here with the Recorder."""
    import runpy
    import unittest

    from django.test import runner as django_runner

    wanted, reported = set(request["tests"]), set()
    statuses, loaded = {}, {}

    class Recorder(unittest.TestResult):
        def _set(self, test, status, err=None):
            statuses.setdefault(test.id(), (status, _detail(err)))

        def startTest(self, test):
            sys.path[:] = _stdlib_first(root)
            guard.hooks()
            super().startTest(test)

        def addSuccess(self, test):
            self._set(test, "PASSED")

        def addFailure(self, test, err):
            self._set(test, "FAILED", err)

        def addError(self, test, err):
            if not isinstance(test, unittest.TestCase):  # a class or module fixture failed
                channel.emit({"collect_error": str(test), "detail": _detail(err)})
            self._set(test, "ERROR", err)

        def addSkip(self, test, reason):
            self._set(test, "SKIPPED", (type("Skipped", (), {}), reason))

        def addExpectedFailure(self, test, err):
            self._set(test, "XFAIL", err)

        def addUnexpectedSuccess(self, test):
            self._set(test, "XPASS")

        def addSubTest(self, test, subtest, err):
            if err is not None:
                self._set(test, "FAILED" if issubclass(err[0], test.failureException) else "ERROR", err)

        def stopTest(self, test):
            super().stopTest(test)
            guard.hooks()
            status, detail = statuses.get(test.id(), ("ERROR", "the test reported no outcome"))
            test_id = _django_id(test, wanted, reported)
            reported.add(test_id)
            channel.test(test_id, status, detail)

    class Runner:
        """Holds ``run_suite``, which stands in for Django's ``DiscoverRunner.run_suite`` (every version
        has it): the suite runtests.py built runs with the Recorder."""

        def run_suite(self, suite, **kwargs):
            tests = list(_flatten(suite))
            for test in tests:
                if test.id() not in loaded:
                    loaded[test.id()] = test
                    method = getattr(type(test), getattr(test, "_testMethodName", ""), None)
                    guard.loaded(test.id(), method, type(test))
            result = Recorder()
            unittest.TestSuite(tests).run(result)
            return result

    django_runner.DiscoverRunner.run_suite = Runner.run_suite
    guard = guard_for(UNITTEST_MODULES, [("result class", Recorder), ("runner class", Runner)])
    channel.emit({"begin": "django"})
    script = os.path.join(root, "tests", "runtests.py")
    sys.argv = [script, *(request.get("options") or ()), *request["files"]]
    sys.path.insert(0, os.path.dirname(script))  # as when runtests.py runs as a script
    with contextlib.suppress(SystemExit):  # runtests.py exits with its failure count; what ran was reported
        runpy.run_path(script, run_name="__main__")
    return guard.finish(
        lambda test_id: getattr(type(loaded[test_id]), getattr(loaded[test_id], "_testMethodName", ""), None)
    )


SYMPY_SEED = 20240101
SYMPY_STATUS = {"Skipped": "SKIPPED", "XPass": "XPASS"}
SYMPY_RANK = ("PASSED", "SKIPPED", "XPASS", "FAILED", "ERROR")


def _unwrapped(func):
    while hasattr(func, "__wrapped__"):
        func = func.__wrapped__
    return func


def _sympy_outcome(func):
    """``(status, detail)`` of one SymPy test function, judged as its ``bin/test`` judges it; an expected
    failure (``XFail``) is not a pass, as in SWE-bench's SymPy grading, whose log parser never counts one."""
    import inspect
    import random
    import warnings

    if getattr(func, "_slow", False):
        return "SKIPPED", "Slow"
    if inspect.isgeneratorfunction(_unwrapped(func)):
        return "ERROR", "a generator test: its cases are not run here"
    deprecated = getattr(sys.modules.get("sympy.utilities.exceptions"), "SymPyDeprecationWarning", None)
    random.seed(SYMPY_SEED)
    try:
        with warnings.catch_warnings():
            if deprecated is not None:
                warnings.simplefilter("error", deprecated)
            func()
    except Exception:
        err = sys.exc_info()
        kind = err[0].__name__
        if err[0] is AssertionError:
            return "FAILED", _detail(err)
        if kind == "XFail":
            return "FAILED", "XFail: an expected failure does not pass"
        return SYMPY_STATUS.get(kind, "ERROR"), _detail(err)
    return "PASSED", ""


def run_sympy(request, channel, guard_for, root):
    """SymPy's ``bin/test`` conventions: each given test file is executed in a fresh namespace, and each
    of its ``test_*`` functions defined in that file runs in line order (``@slow`` ones skipped;
    ``Skipped``, ``XFail``, ``XPass`` read by name as SymPy does). Tests are reported by bare name, as
    SymPy rows name them; a name defined in two files passes only where it passes in both."""
    import inspect

    guard = guard_for(("builtins",), [])
    channel.emit({"begin": "sympy"})
    outcomes, scopes = {}, {}
    for path in request["files"]:
        filename = os.path.join(root, path)
        scope = {"__file__": filename}
        try:
            with open(filename, encoding="utf-8") as handle:
                code = compile(handle.read(), filename, "exec", dont_inherit=True)
            exec(code, scope)
        except Exception:
            channel.emit({"collect_error": path, "detail": _detail(sys.exc_info())})
            continue
        funcs = [
            (name, func)
            for name, func in list(scope.items())
            if name.startswith("test_")
            and inspect.isfunction(func)
            and getattr(_unwrapped(func), "__code__", None) is not None
            and _unwrapped(func).__code__.co_filename == filename
        ]
        funcs.sort(key=lambda item: _unwrapped(item[1]).__code__.co_firstlineno)
        for name, func in funcs:
            test_id = path + "::" + name
            scopes[test_id] = (scope, name)
            guard.loaded(test_id, func)
            sys.path[:] = _stdlib_first(root)
            guard.hooks()
            status, detail = _sympy_outcome(func)
            guard.hooks()
            was = outcomes.get(name)
            if was is None or SYMPY_RANK.index(status) > SYMPY_RANK.index(was[0]):
                outcomes[name] = (status, detail)
    for name, (status, detail) in outcomes.items():
        channel.test(name, status, detail)
    return guard.finish(lambda test_id: scopes[test_id][0].get(scopes[test_id][1]))


DRIVERS = {"unittest": run_unittest, "pytest": run_pytest, "django": run_django, "sympy": run_sympy}


def main():
    request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    channel = Channel(request["nonce"])
    try:
        root = os.path.realpath(os.getcwd())
        sys.path[:] = _stdlib_first(root)
        _declared(request, root)
        sys.dont_write_bytecode = True
        os.makedirs(os.environ.get("HOME") or "/tmp/cascade-home", exist_ok=True)
        if request["framework"] == "pytest":
            import pytest  # noqa: F401  (the framework's own modules load from their usual bytecode)
        else:
            import unittest  # noqa: F401
        sys.pycache_prefix = os.path.join(os.environ.get("HOME") or "/tmp", ".pycache")
        agent_paths = frozenset(request.get("agent_paths") or ())

        def guard_for(modules, extra):
            return Guard(
                root, agent_paths, modules, [("result channel", channel), ("channel class", Channel), *extra]
            )

        run = DRIVERS[request["framework"]]
        tampered = run(request, channel, guard_for, root)
        if tampered:
            channel.emit({"tampered": tampered})
        channel.emit({"end": channel.reported})
    except BaseException:
        import traceback

        channel.emit({"crash": traceback.format_exc()[-1000:]})
    os._exit(0)


if __name__ == "__main__":
    main()
