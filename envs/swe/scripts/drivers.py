"""The drivers: how each kind of test suite runs under the runner, and what it records.

Part of the program the sandbox runs (``scripts/__init__.py``); Python 3.6 syntax. ``DRIVERS``:
``unittest`` loads the ids; ``pytest`` runs the files; ``django`` runs the repository's own
``tests/runtests.py`` with its options and labels, its suite run by this runner and each test
reported in the row's id format; ``sympy`` runs the test functions of the files as SymPy's
``bin/test`` does. Each reports ``ready`` before any repository code is imported, records every
outcome through ``_record`` and reports each test once through ``_report``.
"""

import contextlib
import os
import sys

from .guard import MAX_DETAIL, _emit, _guard, _kernel, _record, _report, _report_now, _stdlib_first
from .kernel import clean


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
    return _kernel().state("root")


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
                _kernel().state("outcomes").expect(item.nodeid, True)
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
            _kernel().check()
            _record(name, status, detail)
            names.append(name)
    for name in dict.fromkeys(names):
        _report(name)


DRIVERS = {"unittest": run_unittest, "pytest": run_pytest, "django": run_django, "sympy": run_sympy}
