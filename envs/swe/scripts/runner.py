"""The trusted test runner: runs a task's tests and reports each outcome.

Started in the clean-room workspace (cwd: the repository) as the program ``scripts/__init__.py``
builds (``kernel.py``, then this file) under the task's interpreter (``<python> -I -B -c``), with a
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
refuses). Results never come from text the tests print.

``sys.path`` is the standard library first, then the repository, then site-packages (kept so
before every test). Once the framework is imported, ``sys.pycache_prefix`` points at an empty
directory, so no bytecode in the tree's ``__pycache__`` folders is ever loaded.

How a test's outcome is kept: every failure is recorded when it happens and the worst outcome of a
test wins, so nothing recorded later (a success forged through a reachable result object, errors
cleared from unittest's outcome) turns a failure into a pass. An expected failure counts only
where the test file declared it: unittest's ``expectedFailure`` as loaded, pytest's ``xfail`` mark
as collected, or an imperative ``pytest.xfail`` raised from outside the agent's files; a test that
stops itself (unittest's ``_ShouldStop``) is an error.

``Guard`` checks, around every test and at the end, that the code under test left the verdict
machinery alone; a run that fails a check is reported ``tampered``:

- the functions and methods of the frameworks' running and reporting modules, of the standard
  library modules the runner reports through (``RUNNER_MODULES``) and of the runner itself are the
  objects (and code) they were;
- no pytest plugin, trace or profile function, import hook (``sys.meta_path``,
  ``sys.path_hooks``) comes from a file of the agent's change, nor is a function without a file;
- no test class from such a file redefines how a test runs, and each test's function is the
  one that was loaded, from the test's own file, when it starts and when it ends;
- no class from such a file compares equal to values it has never seen: random values of the
  built-in types, and instances of its own class in other states (``Probe``).

What is not defended: code that corrupts the interpreter itself (a memory-safety bug of CPython or
of a C extension), and a test framework that is itself the agent's code (pytest's own repository).
"""

import contextlib
import importlib
import os
import sys

from .kernel import Kernel, clean, start  # the program is kernel.py + this file

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
    "unittest",
    "unittest.case",
    "unittest.result",
    "unittest.suite",
    "unittest.loader",
    "unittest.util",
)
PYTEST_MODULES = (
    "pytest",
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
)
FRAMEWORK_MODULES = {
    "unittest": UNITTEST_MODULES,
    "django": UNITTEST_MODULES,
    "pytest": PYTEST_MODULES,
    "sympy": (),
}
"""The framework each driver runs on: imported and fingerprinted before any repository code."""
RUNNER_MODULES = (
    "builtins",
    "os",
    "posixpath",
    "gc",
    "contextlib",
    "importlib",
    "traceback",
    "types",
    "inspect",
    "random",
    "runpy",
)
"""Standard library modules the runner records and reports through (their functions and classes)."""
CLASSES_ONLY = ("warnings",)
"""Standard library modules whose classes the runner uses, but whose functions the frameworks swap
around each test (pytest's warning capture): only their classes are fingerprinted."""
SEVERITY = ("PASSED", "XFAIL", "SKIPPED", "XPASS", "FAILED", "ERROR")
MAX_DETAIL = 300


def _stdlib_first(root):
    """sys.path as: the standard library, the repository, then site-packages (and anything else)."""
    paths = [p for p in sys.path if p not in ("", ".", root, os.getcwd())]
    sites = [p for p in paths if "site-packages" in p or "dist-packages" in p]
    stdlib = [p for p in paths if p not in sites]
    return [*stdlib, root, *sites]


def _origin(obj):
    """The file ``obj``'s code comes from: a function's code, a module's file, or its class's module's."""
    func = getattr(obj, "__func__", obj)
    code = getattr(func, "__code__", None)
    if code is not None:
        name = code.co_filename
        return name if not name.startswith("<") else "<code without a file>"
    if isinstance(obj, type(sys)):
        return getattr(obj, "__file__", None)
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(sys.modules.get(getattr(cls, "__module__", "") or ""), "__file__", None)


def _severity(status):
    return SEVERITY.index(status) if status in SEVERITY else len(SEVERITY)


class Outcomes:
    """Each test's outcomes as they happen. Its status is the worst of them; an ``XFAIL`` counts only
    where the test's file declared the failure (``expect``); each test is reported once."""

    def __init__(self, strict=True):
        self.strict, self.outcomes, self.declared, self.sent = strict, {}, {}, set()

    def expect(self, test_id, declared):
        self.declared[clean(test_id)] = bool(declared)

    def record(self, test_id, status, detail=""):
        test_id = clean(test_id)
        if status == "XFAIL" and self.strict and not self.declared.get(test_id):
            status, detail = "FAILED", "an expected failure its test file did not declare: " + clean(detail)
        now = self.outcomes.get(test_id)
        if now is None or _severity(status) > _severity(now[0]) or not self.strict:
            self.outcomes[test_id] = (status, clean(detail, MAX_DETAIL))

    def take(self, test_id, name=None):
        """The record of ``test_id`` (reported as ``name``, the row's id for it), once (``None`` after that)."""
        test_id = clean(test_id)
        if test_id in self.sent:
            return None
        self.sent.add(test_id)
        status, detail = self.outcomes.get(test_id, ("ERROR", "the test reported no outcome"))
        return {"test": clean(name) if name is not None else test_id, "status": status, "detail": detail}


KERNEL = None
"""The kernel, set by ``main``: what the runner keeps lives behind it (``keep``/``state``)."""


def _record(test_id, status, detail=""):
    KERNEL.state("outcomes").record(test_id, status, detail)


def _report(test_id, name=None):
    """A test ended: check the verdict machinery, then send its record (as ``name``, when given)."""
    KERNEL.state("guard").checkpoint()
    record = KERNEL.state("outcomes").take(test_id, name)
    if record is not None:
        KERNEL.report(record)


def _report_now(test_id, status, detail):
    """A test that could not even be loaded."""
    _record(test_id, status, detail)
    _report(test_id)


def _emit(record):
    KERNEL.report(record)


def _guard():
    return KERNEL.state("guard")


class Probe:
    """Values an honest ``__eq__`` does not call equal to an object it was not built from."""

    def __init__(self):
        seed = int.from_bytes(os.urandom(8), "big")
        ints = [seed % 10**12 + 7, -(seed % 10**9) - 11, seed]
        self.values = [
            ints,
            [float(i) / 7.0 for i in ints],
            ["cascade-%x" % i for i in ints],
            [("%x" % i).encode() for i in ints],
            [(i, "x") for i in ints],
            [[i, i + 1] for i in ints],
            [{"k%x" % i: i} for i in ints],
            [complex(i, 1) for i in ints],
        ]

    def always_equal(self, cls, instances):
        """Why ``cls``'s ``__eq__`` (or ordering) says yes to what it has never seen, or ``None``:
        random values of the built-in types, and instances of ``cls`` itself in unrelated states."""
        eq, lt = vars(cls).get("__eq__"), vars(cls).get("__lt__")
        for obj in instances:
            for probes in self.values:
                if eq is not None and all(_truthy(eq, obj, p) for p in probes):
                    return "equals every %s" % type(probes[0]).__name__
        distinct = self.strangers(cls)
        for obj in instances:
            state = getattr(obj, "__dict__", None)
            if state and all(state != vars(other) for other in distinct):
                distinct.append(obj)
        pairs = [(a, b) for a in distinct for b in distinct if a is not b]
        if len(distinct) >= 3 and eq is not None and all(_truthy(eq, a, b) for a, b in pairs):
            return "equals every other %s, whatever its state" % cls.__name__
        if len(distinct) >= 3 and lt is not None and all(_truthy(lt, a, b) for a, b in pairs):
            return "orders every two %s both ways" % cls.__name__
        return None

    def strangers(self, cls):
        """Three instances of ``cls`` built without ``__init__``, every attribute its ``__init__`` names (and
        its dataclass fields and slots) set to random values of their own: no honest ``__eq__`` calls them
        equal, nor orders each before the other."""
        names, mro = set(), getattr(cls, "__mro__", ())
        if any(klass.__module__ == "builtins" for klass in mro[1:-1]):
            return []  # its state lives in a built-in base (a dict, a list...), not in attributes
        for klass in mro[:-1]:
            init = vars(klass).get("__init__")
            names.update(getattr(getattr(init, "__code__", None), "co_names", ()))
            names.update(getattr(klass, "__dataclass_fields__", None) or ())
            slots = vars(klass).get("__slots__", ())
            names.update([slots] if isinstance(slots, str) else slots)
        made = []
        for value in self.values[0] if names else ():
            with contextlib.suppress(Exception):
                obj = cls.__new__(cls)
                for n, name in enumerate(sorted(names)):
                    with contextlib.suppress(Exception):
                        object.__setattr__(obj, name, value + n)
                made.append(obj)
        return made


def _truthy(eq, a, b):
    try:
        result = eq(a, b)
        return result is not NotImplemented and bool(result)
    except Exception:
        return False


class Guard:
    """The checks that need the frameworks' objects (see the module docstring); what they find goes to
    the kernel (``flag``), which keeps it where the code under test cannot clear it."""

    def __init__(self, root, agent_paths, active=True):
        self.root, self.agent_paths, self.active = root, agent_paths, active
        self.tests = {}
        self.known_hooks = {id(hook) for _, hook in self._hooks()}
        self.probe, self.equal_checked = Probe(), set()

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
        if self.active:
            KERNEL.flag(reason)

    def hooks(self):
        """New trace, profile and import hooks from the agent's files or without one (around every test)."""
        for what, hook in self._hooks():
            where = id(hook) not in self.known_hooks and self.agent_file(hook)
            if where:
                self.flag(f"{what} from {where} was installed")

    def loaded(self, test_id, func, cls=None, expecting=False, files=(), word=""):
        """A test was loaded: remember its function, and whether it is expected to fail: marked so when
        loaded, and by its own test ``files`` (which must name the marker, ``word``)."""
        func = getattr(func, "__func__", func)
        self.tests[clean(test_id)] = func
        KERNEL.state("outcomes").expect(test_id, expecting and any(self._names(path, word) for path in files))
        where = func is not None and self.agent_file(func)
        if where:
            self.flag(f"test {test_id} runs code from {where}")
        for klass in getattr(cls, "__mro__", ()):
            where = self.agent_file(klass)
            if where and any(name in vars(klass) for name in RUN_METHODS):
                self.flag(f"test class {klass.__name__} from {where} redefines how a test runs")

    def _names(self, path, word):
        try:
            with open(os.path.join(self.root, path), encoding="utf-8", errors="replace") as f:
                return word in f.read()
        except OSError:
            return False

    def modules(self):
        """No module's class was swapped for one of the agent's (its ``__getattribute__`` would see the loader)."""
        for name, module in list(sys.modules.items()):
            kind = type(module)
            if kind is not type(sys) and self.agent_file(kind):
                self.flag(
                    f"module {name} was made an instance of {kind.__name__} from {self.agent_file(kind)}"
                )

    def same_test(self, test_id, now):
        """``now`` is the function ``test_id`` was loaded with (checked as a test starts and ends)."""
        if clean(test_id) in self.tests and getattr(now, "__func__", now) is not self.tests[clean(test_id)]:
            self.flag(f"test {test_id} was replaced")

    def checkpoint(self):
        """Between two tests: the hooks, the modules, and the classes of the agent's modules."""
        self.hooks()
        self.modules()
        self.always_equal(list(self._agent_classes()), {})

    def finish(self):
        """The end of the run: every class of the agent's with an ``__eq__``, and their live instances."""
        self.checkpoint()
        import gc

        classes, instances = [], {}
        for obj in gc.get_objects():
            if isinstance(obj, type):
                if "__eq__" in vars(obj) and self.agent_file(obj):
                    classes.append(obj)
            elif type(obj) in self.equal_checked and len(instances.setdefault(type(obj), [])) < 8:
                instances[type(obj)].append(obj)
        self.always_equal(classes, instances)

    def _agent_classes(self):
        """The classes the agent's modules define (not those they import) that define ``__eq__``."""
        for module in list(sys.modules.values()):
            if getattr(module, "__file__", None) and self.agent_file(module):
                for value in list(vars(module).values()):
                    if isinstance(value, type) and "__eq__" in vars(value) and self.agent_file(value):
                        yield value

    def always_equal(self, classes, instances):
        """Classes from the agent's files whose ``__eq__`` says yes to values they have never seen."""
        for cls in classes:
            self.equal_checked.add(cls)
            made = []
            with contextlib.suppress(Exception):
                made.append(cls.__new__(cls))
            why = self.probe.always_equal(cls, made + instances.get(cls, []))
            if why:
                self.flag(f"class {cls.__name__} from {self.agent_file(cls)} {why}")

    def raised_by_agent(self, tb):
        """Whether the exception of traceback ``tb`` was raised from the agent's files (its innermost
        frame outside the test frameworks)."""
        where = None
        while tb is not None:
            name = tb.tb_frame.f_code.co_filename
            if not any(part in name for part in ("/_pytest/", "/pluggy/", "/unittest/")):
                where = name
            tb = tb.tb_next
        if where is None or where.startswith("<"):
            return where is not None
        return os.path.relpath(os.path.realpath(where), self.root) in self.agent_paths


def _unittest_recorder(report_as=None):
    """A unittest result class that records every outcome as it happens, and reports each test when it
    stops (under ``report_as(test)``, the row's id, when given)."""
    import unittest

    class Recorder(unittest.TestResult):
        def startTest(self, test):
            sys.path[:] = _stdlib_first(root_of_run())
            _guard().hooks()
            _guard().same_test(test.id(), getattr(type(test), getattr(test, "_testMethodName", ""), None))
            super().startTest(test)

        def addSuccess(self, test):
            _record(test.id(), "PASSED")

        def addFailure(self, test, err):
            _record(test.id(), "FAILED", _detail(err))

        def addError(self, test, err):
            if not isinstance(test, unittest.TestCase):  # a class or module fixture failed
                _emit({"collect_error": clean(str(test)), "detail": clean(_detail(err), MAX_DETAIL)})
            _record(test.id(), "ERROR", _detail(err))

        def addSkip(self, test, reason):
            _record(test.id(), "SKIPPED", reason)

        def addExpectedFailure(self, test, err):
            _record(test.id(), "XFAIL", _detail(err))

        def addUnexpectedSuccess(self, test):
            _record(test.id(), "XPASS")

        def addSubTest(self, test, subtest, err):
            if err is not None:
                failed = issubclass(err[0], test.failureException)
                _record(test.id(), "FAILED" if failed else "ERROR", _detail(err))

        def stopTest(self, test):
            super().stopTest(test)
            _guard().same_test(test.id(), getattr(type(test), getattr(test, "_testMethodName", ""), None))
            _report(test.id(), report_as(test) if report_as else None)

    return Recorder


def root_of_run():
    return KERNEL.state("root")


def _load_unittest(test, loaded):
    """Remember a unittest test before it runs (its function, and whether its file expects it to fail)."""
    if test.id() in loaded:
        return False
    loaded[test.id()] = test
    method = getattr(type(test), getattr(test, "_testMethodName", ""), None)
    expecting = getattr(method, "__unittest_expecting_failure__", False) or getattr(
        type(test), "__unittest_expecting_failure__", False
    )
    files = _unittest_files(test)
    _guard().loaded(test.id(), method, type(test), expecting, files, "expectedFailure")
    return True


def run_unittest(request, root):
    import unittest

    _emit({"ready": "unittest"})
    loader, suite, loaded = unittest.TestLoader(), unittest.TestSuite(), {}
    for test_id in request["tests"]:
        try:
            tests = list(_flatten(loader.loadTestsFromName(test_id)))
        except Exception:  # the module (or what it imports) raised: the test cannot run
            _report_now(test_id, "ERROR", _detail(sys.exc_info()))
            continue
        failed = [t for t in tests if type(t).__name__ == "_FailedTest"]  # could not be imported or found
        if failed:
            _report_now(test_id, "ERROR", str(getattr(failed[0], "_exception", "")))
            continue
        for test in tests:
            if _load_unittest(test, loaded):
                suite.addTest(test)
    suite.run(_unittest_recorder()())


def _part_executor(part):
    """unittest's ``_Outcome.testPartExecutor``, recording a part's failure as it is raised: nothing can
    clear it later, and a test that stops itself (``_ShouldStop``) is an error, not a pass."""
    import unittest.case

    @contextlib.contextmanager
    def executor(outcome, test_case, *args, **kwargs):
        with part(outcome, test_case, *args, **kwargs):
            try:
                yield
            except unittest.SkipTest as exc:
                _record(_test_of(test_case).id(), "SKIPPED", str(exc))
                raise
            except unittest.case._ShouldStop:
                _record(_test_of(test_case).id(), "ERROR", "the test stopped itself")
                raise
            except KeyboardInterrupt:
                raise
            except BaseException:
                test, err = _test_of(test_case), sys.exc_info()
                if outcome.expecting_failure:
                    _record(test.id(), "XFAIL", _detail(err))
                else:
                    _record(
                        test.id(),
                        "FAILED" if issubclass(err[0], test.failureException) else "ERROR",
                        _detail(err),
                    )
                raise

    return executor


def _unittest_files(test):
    """The files a unittest test can come from: its class's module's file, and its id read as a path."""
    module = sys.modules.get(type(test).__module__)
    space = object.__getattribute__(module, "__dict__") if module is not None else {}
    file = space.get("__file__")
    root = root_of_run()
    found = [os.path.relpath(os.path.realpath(file), root)] if isinstance(file, str) else []
    parts = test.id().split(".")
    return found + [
        "/".join(parts[:k]) + suffix
        for k in range(len(parts) - 1, 0, -1)
        for suffix in (".py", "/__init__.py")
    ]


def _pytest_files(path):
    """A pytest test file and the ``conftest.py`` files above it, up to the repository."""
    folders = path.split("/")[:-1]
    return [path] + ["/".join([*folders[:k], "conftest.py"]) for k in range(len(folders), -1, -1)]


def _test_of(test_case):
    return getattr(test_case, "test_case", test_case)  # a subtest's own test


def _detail(err):
    if not err:
        return ""
    kind, value = err[0], err[1]
    first = (clean(str(value)).strip().splitlines() or [""])[0]
    return clean(getattr(kind, "__name__", "?")) + (": " + first if first else "")


def _flatten(suite):
    for item in suite:
        if hasattr(item, "__iter__"):
            yield from _flatten(item)
        else:
            yield item


def run_pytest(request, root):
    import pytest
    from _pytest.outcomes import XFailed

    items = {}

    class Recorder:
        def pytest_collectreport(self, report):
            if report.failed:
                _emit(
                    {"collect_error": clean(report.nodeid), "detail": clean(str(report.longrepr), MAX_DETAIL)}
                )

        def pytest_collection_finish(self, session):
            for item in session.items:
                items[item.nodeid] = item
                expecting = any(True for _ in item.iter_markers(name="xfail"))
                files = _pytest_files(item.nodeid.split("::")[0])
                obj, cls = getattr(item, "obj", None), getattr(item, "cls", None)
                _guard().loaded(item.nodeid, obj, cls, expecting, files, "xfail")

        def pytest_runtest_setup(self, item):
            sys.path[:] = _stdlib_first(root)
            _guard().hooks()
            _guard().same_test(item.nodeid, getattr(item, "obj", None))

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(self, item, call):
            excinfo = (
                call.excinfo
            )  # an imperative pytest.xfail() declares the failure if a test file raised it
            if (
                excinfo is not None
                and isinstance(excinfo.value, XFailed)
                and not _guard().raised_by_agent(excinfo.tb)
            ):
                KERNEL.state("outcomes").expect(item.nodeid, True)
            yield

        def pytest_runtest_logreport(self, report):
            xfail, outcome = hasattr(report, "wasxfail"), report.outcome
            detail = str(report.longrepr or "")[-MAX_DETAIL:]
            if report.when == "call" or outcome != "passed":
                if outcome == "passed":
                    status = "XPASS" if xfail else "PASSED"
                elif outcome == "skipped":
                    status = "XFAIL" if xfail else "SKIPPED"
                else:
                    status = "FAILED" if report.when == "call" else "ERROR"
                _record(report.nodeid, status, detail)

        def pytest_runtest_logfinish(self, nodeid, location):
            if nodeid in items:
                _guard().same_test(nodeid, getattr(items[nodeid], "obj", None))
            _report(nodeid)

        def pytest_unconfigure(self, config):
            for name, plugin in config.pluginmanager.list_name_plugin():
                where = _guard().agent_file(plugin)
                if where and where != "<code without a file>":
                    _guard().flag(f"a pytest plugin from {where} was registered ({name})")

    _emit({"ready": "pytest " + pytest.__version__})
    pytest.main(["-p", "no:cacheprovider", "-q", "--rootdir", root, *request["files"]], plugins=[Recorder()])


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


def _django_id(test, wanted, reported):
    """The id a Django row gives ``test``: ``name (module.Class)``, ``name (module.Class.name)`` (3.11+),
    its docstring's first line (what Django's verbose log shows then), or unittest's id."""
    name = getattr(test, "_testMethodName", "")
    cls = f"{type(test).__module__}.{type(test).__qualname__}"
    doc = test.shortDescription() if hasattr(test, "shortDescription") else None
    for candidate in (f"{name} ({cls})", f"{name} ({cls}.{name})", doc, test.id()):
        if candidate and candidate in wanted and candidate not in reported:
            reported.add(candidate)
            return candidate
    return test.id()


def run_django(request, root):
    """Django's own ``tests/runtests.py`` (its settings module, apps, databases and options, e.g.
    ``--settings=test_sqlite --parallel 1``) runs the labels, as SWE-bench runs it; its test runner's
    ``run_suite`` is this runner's, so the suite runtests.py builds runs here with the Recorder."""
    import runpy
    import unittest

    _emit({"ready": "django"})
    from django.test import runner as django_runner  # the repository's code: only once the run began

    wanted, reported, loaded = set(request["tests"]), set(), {}
    recorder = _unittest_recorder(lambda test: _django_id(test, wanted, reported))

    def run_suite(self, suite, **kwargs):
        """Stands in for Django's ``DiscoverRunner.run_suite`` (every version has it)."""
        tests = [test for test in _flatten(suite) if _load_unittest(test, loaded)]
        result = recorder()
        unittest.TestSuite(tests).run(result)
        return result

    django_runner.DiscoverRunner.run_suite = run_suite
    script = os.path.join(root, "tests", "runtests.py")
    sys.argv = [script, *(request.get("options") or ()), *request["files"]]
    sys.path.insert(0, os.path.dirname(script))  # as when runtests.py runs as a script
    with contextlib.suppress(SystemExit):  # runtests.py exits with its failure count; what ran was reported
        runpy.run_path(script, run_name="__main__")


SYMPY_SEED = 20240101
SYMPY_STATUS = {"Skipped": "SKIPPED", "XPass": "XPASS"}


def _unwrapped(func):
    while hasattr(func, "__wrapped__"):
        func = func.__wrapped__
    return func


def _sympy_outcome(func):
    """``(status, detail)`` of one SymPy test function, judged as its ``bin/test`` judges it; an expected
    failure (``XFail``) is not a pass, as in SWE-bench's SymPy grading, whose log parser never counts one.
    Only a normal return passes; the warning filters are saved and restored by hand (no context manager
    of the standard library's stands between the test and that ``except``)."""
    import inspect
    import random
    import warnings

    if getattr(func, "_slow", False):
        return "SKIPPED", "Slow"
    if inspect.isgeneratorfunction(_unwrapped(func)):
        return "ERROR", "a generator test: its cases are not run here"
    deprecated = getattr(sys.modules.get("sympy.utilities.exceptions"), "SymPyDeprecationWarning", None)
    random.seed(SYMPY_SEED)
    filters = list(warnings.filters)
    try:
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
    finally:
        warnings.filters[:] = filters
    return "PASSED", ""


def run_sympy(request, root):
    """SymPy's ``bin/test`` conventions: each given test file is executed in a fresh namespace, and each
    of its ``test_*`` functions defined in that file runs in line order (``@slow`` ones skipped;
    ``Skipped``, ``XFail``, ``XPass`` read by name as SymPy does). Tests are reported by bare name, as
    SymPy rows name them; a name defined in two files passes only where it passes in both."""
    import inspect

    _emit({"ready": "sympy"})
    names = []
    for path in request["files"]:
        filename = os.path.join(root, path)
        scope = {"__file__": filename}
        try:
            with open(filename, encoding="utf-8") as handle:
                code = compile(handle.read(), filename, "exec", dont_inherit=True)
            exec(code, scope)
        except Exception:
            _emit({"collect_error": clean(path), "detail": clean(_detail(sys.exc_info()), MAX_DETAIL)})
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
            _guard().loaded(path + "::" + name, func)
            sys.path[:] = _stdlib_first(root)
            _guard().hooks()
            status, detail = _sympy_outcome(func)
            _guard().same_test(path + "::" + name, scope.get(name))
            _guard().checkpoint()
            KERNEL.check()
            _record(name, status, detail)
            names.append(name)
    for name in dict.fromkeys(names):
        _report(name)


DRIVERS = {"unittest": run_unittest, "pytest": run_pytest, "django": run_django, "sympy": run_sympy}


def main():
    global KERNEL
    request, reporter = start()
    root = os.path.realpath(os.getcwd())
    agent_paths = frozenset(request.get("agent_paths") or ())
    off = frozenset(request.get("defences_off") or ())
    KERNEL = kernel = Kernel(reporter, root, agent_paths, off)
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
        kernel.install(_trusted_code())
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
