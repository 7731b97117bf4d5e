"""What the runner keeps of each test, and the checks that need the frameworks' objects.

Part of the program the sandbox runs (``scripts/__init__.py``); Python 3.6 syntax. ``Outcomes`` and
``Guard`` are kept by the kernel (``kernel.py``), where code under test cannot reach them; the
drivers reach them through ``_record``, ``_report`` and ``_guard``.

How a test's outcome is kept: every failure is recorded when it happens and the worst outcome of a
test wins, so nothing recorded later (a success forged through a reachable result object, errors
cleared from unittest's outcome) turns a failure into a pass. An expected failure counts only
where the test file declares it: marked so when loaded (unittest's ``expectedFailure``, pytest's
``xfail``) in a test file that names the marker, or an imperative ``pytest.xfail`` raised from
outside the agent's files.

``Guard`` checks around every test and at the end (its findings go to the kernel: ``tampered``):

- no pytest plugin, trace or profile function, import hook (``sys.meta_path``,
  ``sys.path_hooks``) comes from a file of the agent's change, nor is a function without a file;
  no module was made an instance of a class of the agent's;
- no test class from such a file redefines how a test runs, and each test's function is the
  one that was loaded, from the test's own file, when it starts and when it ends;
- no class from such a file compares equal to values it has never seen: random values of the
  built-in types, and instances of its own class in unrelated states (``Probe``).

The kernel itself compares, before every record, the fingerprints of the frameworks, the standard
library modules the runner reports through (``RUNNER_MODULES``) and the runner's own namespace.
"""

import contextlib
import os
import sys

from .kernel import clean

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
"""The kernel (``use_kernel``): what the runner keeps lives behind it (``keep``/``state``)."""


def use_kernel(kernel):
    global KERNEL
    KERNEL = kernel


def _kernel():
    return KERNEL


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
