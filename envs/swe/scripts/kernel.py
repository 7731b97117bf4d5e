"""The test process's kernel: the runner's state and the one path a record takes, behind an audit hook.

Part of the program the sandbox runs (``scripts/__init__.py``); Python 3.6 syntax; the audit hook
(``hook.py``) needs Python >= 3.8 (PEP 578). Code is *untrusted* when its file is one the agent's
change wrote, when the agent's code compiled or executed it, when it runs in a thread the runner
did not see started by trusted code, or in a signal handler registered by untrusted code (which
gets ``None`` for the frame). The hook refuses untrusted code:

- frames (``sys._getframe``, ``sys._current_frames``, the frames of tracebacks, generators and
  coroutines) when the code asking is untrusted, or hands frames out and one of its ``NEAR``
  callers is, so the standard library's own stack walks (``logging``, ``traceback``) keep working;
- when any frame is untrusted: the garbage collector's object lists, ``ctypes``, trace, profile and
  monitoring functions, new audit hooks, code objects built or unmarshalled, a function's
  ``__code__`` replaced, ``/proc/*/mem`` opened, a second instance of a built-in module;
- and reports as tampering (a 0): source compiled under a name that is not its own, a class of the
  standard library, the test framework or the runner given new bases, a connection to the result
  channel, or a request to the kernel from anything but the runner's own code on a trusted
  main-thread stack.

Inside the hook nothing of the agent's runs: arguments are type-checked before any use, so no
``__eq__``, ``__hash__`` or property of theirs is called while it decides.
"""

import os
import sys

NEAR = 3
"""Innermost frames an introspection call needs trusted (``logging``'s own is 4 deep)."""
RUNNER_NAME = "<cascade-runner>"
"""The file name the runner's program is compiled under (``scripts/__init__.py``)."""
FRAME_ATTRS = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame"))
NEAR_EVENTS = frozenset(("sys._getframe", "sys._current_frames", "sys._current_exceptions"))
ANY_EVENTS = frozenset(
    (
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys.settrace",
        "sys.setprofile",
        "sys.monitoring.register_callback",
        "sys.addaudithook",
        "code.__new__",
        "marshal.loads",
        "marshal.load",
    )
)
FRAMEWORK = ("unittest", "_pytest", "pytest", "pluggy", "builtins", "cascade_runner")
"""Modules (by name prefix) whose classes no untrusted code may change: the frameworks and the runner."""
THREAD_STARTS = frozenset(("_thread.start_new_thread", "_thread.start_joinable_thread", "cascade.thread"))
SERVED = ("keep", "state", "baseline", "check", "report", "finish")
"""What the kernel's hook does for the runner's own code (``Kernel``)."""
OWN_EVENTS = frozenset(
    ["cascade." + name for name in SERVED]
    + ["cascade.flag", "cascade.signal", "cascade.getsignal", "cascade.create_builtin"]
)
GUARDED = (
    NEAR_EVENTS
    | ANY_EVENTS
    | THREAD_STARTS
    | OWN_EVENTS
    | frozenset(
        (
            "object.__getattr__",
            "object.__setattr__",
            "object.__delattr__",
            "compile",
            "exec",
            "open",
            "socket.connect",
        )
    )
)


def clean(value, limit=2000):
    """``value`` as an exact ``str`` of at most ``limit`` characters, never through a subclass's methods."""
    if type(value) is not str:
        try:
            value = str.__str__(value) if isinstance(value, str) else object.__repr__(value)
        except Exception:
            value = "<unprintable>"
    return value[-limit:]


def _make_core(send, agent_files=frozenset()):
    """The kernel's state and checks as closures over values bound now (none looks up a global later):
    what the runner keeps, the findings, and fingerprints taken before repository code ran."""
    type_, id_, list_, len_, sorted_, set_ = type, id, list, len, sorted, set
    str_, dict_, issubclass_, type_type = str, dict, issubclass, type
    module_type, function_type = type(sys), type(_make_core)
    methods = (function_type, property, classmethod, staticmethod)
    class_dict, type_module = type.__dict__["__dict__"].__get__, type.__dict__["__module__"].__get__
    startswith, endswith, getattr_, property_ = str.startswith, str.endswith, getattr, property
    kept, found, base, original, spaces = {}, {"refused": [], "tampered": []}, {}, {}, []

    def own_update(label, value):
        """``value`` is one of the updates pytest makes to its own classes as it configures (its legacy-path
        plugin). Nothing else counts: a framework's method swapped for another of its functions is tampering."""
        if not issubclass_(type_(value), methods) or not startswith(label, ("_pytest", "pytest")):
            return False
        function = value.fget if issubclass_(type_(value), property_) else getattr_(value, "__func__", value)
        if type_(function) is not function_type:
            return False
        name = function.__code__.co_filename
        return endswith(name, "/_pytest/legacypath.py") and name not in agent_files

    def fingerprint():
        """``{name: (id, object, module label)}`` of the watched functions, methods and (``every``) values."""
        out = {}
        for label, space, every in spaces:
            if type_(space) is module_type:
                space = space.__dict__
            if type_(space) is not dict_:
                continue
            for name, value in list_(space.items()):
                key = label + "." + (name if type_(name) is str_ else "?")
                if every is True or (every is False and type_(value) is function_type):
                    out[key] = (id_(value), value, label)
                if issubclass_(type_(value), type_type):
                    owner = type_module(value)
                    for attr, member in list_(class_dict(value).items()):
                        if issubclass_(type_(member), methods):
                            out[key + "." + (attr if type_(attr) is str_ else "?")] = (
                                id_(member),
                                member,
                                owner,
                            )
        return out

    def note(kind, what):
        if what not in found[kind] and len_(found[kind]) < 50:
            found[kind].append(what)

    def keep(name, obj):
        if name in kept:
            return note("tampered", "the runner's %s was set twice" % name)
        kept[name] = obj

    def baseline(watched):
        """Fingerprint ``watched`` (``(label, module or dict, every value?)``) once, before any repository code."""
        if base:
            return note("tampered", "the fingerprints were taken twice")
        spaces.extend(watched)
        base.update({key: (value[0], value[2]) for key, value in fingerprint().items()})
        original.update(base)

    def check():
        """What was fingerprinted is still the same objects, and gained nothing. pytest adds and replaces
        methods of its own as it configures and puts them back after (``own_update``): those are taken."""
        if not base:
            return
        current = fingerprint()
        for key in sorted_(set_(base) | set_(current)):
            then, now = base.get(key), current.get(key)
            if then is not None and now is not None and now[0] == then[0]:
                continue
            restored = now is not None and key in original and now[0] == original[key][0]
            if now is not None and (restored or own_update(now[2], now[1])):
                base[key] = (now[0], now[2])
            elif now is None and key not in original:
                del base[key]  # an update of the framework's own, undone
            else:
                note("tampered", ("changed: " if then is not None else "added: ") + key)

    def report(record):
        check()
        send(record)

    def finish(reported):
        check()
        for kind in ("tampered", "refused"):
            if found[kind]:
                send({kind: list_(found[kind])})
        send({"finished": reported})

    return {
        "note": note,
        "keep": keep,
        "state": kept.__getitem__,
        "baseline": baseline,
        "check": check,
        "report": report,
        "finish": finish,
    }


class Kernel:
    """The test process's guard: the runner's state and the one path a record takes (see the module doc).

    ``keep``/``state`` hold the runner's objects, ``flag`` records tampering, ``baseline`` fingerprints
    what must not change and ``check`` compares them, ``report`` sends a record after comparing them,
    ``finish`` sends the findings and ``finished``. Once the hook is installed (``hook.install``), each is a
    request to the audit hook, which holds
    that state where no code of the agent's can reach it and serves only the runner's own code.
    """

    def __init__(self, reporter, root, agent_paths, off=()):
        self.reporter, self.off = reporter, frozenset(off)
        self.agent_files = frozenset(
            path
            for rel in agent_paths
            for path in (os.path.join(root, rel), os.path.realpath(os.path.join(root, rel)))
        )
        core = _make_core(reporter.send)
        self.keep, self.state, self.baseline, self.check = (
            core["keep"],
            core["state"],
            core["baseline"],
            core["check"],
        )
        self.report, self.finish = core["report"], core["finish"]
        self.flag = lambda reason: core["note"]("tampered", reason)


def _requests(audit):
    """The functions the runner (and the swapped-in ``signal``, ``_imp`` and ``threading`` entries) call:
    each asks the hook. Made here, so their closures share no variable with the hook's."""

    def ask_for(event):
        def ask(*args):
            box = []
            audit(event, *args, box)
            return box[0]

        return ask

    api = {name: ask_for("cascade." + name) for name in (*SERVED, "flag")}
    api["signal"], api["getsignal"] = ask_for("cascade.signal"), ask_for("cascade.getsignal")
    api["create_builtin"] = ask_for("cascade.create_builtin")
    return api, ask_for("x").__code__
