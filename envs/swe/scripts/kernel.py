"""The test runner's trusted core: a supervisor that alone talks to the host, and an audit hook.

Prepended to ``runner.py`` in the program the sandbox runs (``scripts/__init__.py``). Python 3.6
syntax (images carry old interpreters); the audit hook needs Python >= 3.8 (PEP 578).

Two processes. ``start()`` forks before the host's request is read:

- the supervisor (the parent) reads the request from stdin, keeps its nonce and hands the rest to
  the test process. Then it only relays: one connection per record on an abstract unix socket,
  taken only from the test process's pid (``SO_PEERCRED``), its shape checked, written to the host
  as ``<nonce> <json>``: ``begin`` when the test process is ready (no repository code imported
  yet), ``end`` only after it sent ``finished`` and exited 0. It runs no repository code and is
  non-dumpable (no ptrace, no ``/proc/<pid>/{mem,fd}`` for other processes of its user);
- the test process never holds the nonce nor a descriptor of the host's pipes (0, 1 and 2 are
  ``/dev/null``), and is non-dumpable too. Knowing the nonce is not enough to forge: a record
  counts only when the test process's own kernel sends it.

``Kernel.install`` adds an audit hook to the test process before any repository code is imported
(CPython cannot remove one). Code is *untrusted* when its file is one the agent's change wrote, when
the agent's code compiled or executed it, when it runs in a thread the runner did not see started by
trusted code, or in a signal handler registered by untrusted code (which gets ``None`` for the
frame). The hook refuses untrusted code:

- frames (``sys._getframe``, ``sys._current_frames``, the frames of tracebacks, generators and
  coroutines) when one of the ``NEAR`` innermost frames is untrusted, so the standard library's
  own stack walks (``logging``, ``traceback``) keep working for everyone;
- when any frame is untrusted: the garbage collector's object lists, ``ctypes``, trace, profile and
  monitoring functions, new audit hooks, code objects built or unmarshalled, a function's
  ``__code__`` replaced, ``/proc/*/mem`` opened, a second instance of a built-in module;
- and reports as tampering (a 0): source compiled under a name that is not its own, attributes set on
  a class of the standard library, the test framework or the runner, a connection to the result
  channel, or a record sent by anything but the runner's own code on a trusted main-thread stack.

Inside the hook nothing of the agent's runs: arguments are type-checked before any use, so no
``__eq__``, ``__hash__`` or property of theirs is called while it decides.
"""

import os
import socket
import struct
import sys

NEAR = 3
"""Innermost frames an introspection call needs trusted (``logging``'s own is 4 deep)."""
RUNNER_NAME = "<cascade-runner>"
"""The file name the runner's program is compiled under (``scripts/__init__.py``)."""
MAX_RECORD = 1 << 16
MAX_RECORDS = 100000
KINDS = ("ready", "test", "collect_error", "tampered", "refused", "crash", "unsupported", "finished")
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


def start():
    """Fork. The supervisor never returns; the test process gets ``(request, Reporter)``."""
    address = "\0cascade-runner-" + os.urandom(12).hex()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    request_r, request_w = os.pipe()
    raw_r, raw_w = os.pipe()  # the old in-process channel, only with defences_off "supervisor"
    child = os.fork()
    if child:
        os.close(request_r)
        os.close(raw_w)
        _supervise(child, listener, request_w, raw_r)
    listener.close()
    os.close(request_w)
    os.close(raw_r)
    import json

    request = json.loads(_read_all(request_r).decode("utf-8"))
    os.close(request_r)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    if "supervisor" not in request.get("defences_off", ()):
        os.close(raw_w)
        raw_w = None
    return request, Reporter(address, raw_w, request.pop("nonce", None))


def _read_all(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data) :]


def not_dumpable():
    """``PR_SET_DUMPABLE`` 0: other processes of this user cannot ptrace this one or read its memory."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except Exception:
        pass


def _supervise(child, listener, request_w, raw_r):
    """The supervisor: hand the request on, then relay checked records from ``child`` to the host."""
    import json
    import select

    not_dumpable()
    request = json.loads(_read_all(0).decode("utf-8"))
    nonce = request.pop("nonce")
    unchecked = "supervisor" in request.get("defences_off", ())
    if unchecked:
        request["nonce"] = nonce
    _write_all(request_w, json.dumps(request).encode("utf-8"))
    os.close(request_w)
    if unchecked:
        while True:
            chunk = os.read(raw_r, 1 << 16)
            if not chunk:
                break
            _write_all(1, chunk)
        os.waitpid(child, 0)
        os._exit(0)
    os.close(raw_r)
    relay = Relay(child, nonce, json.dumps)
    status = None
    while True:
        if status is None:
            done, code = os.waitpid(child, os.WNOHANG)
            status = code if done else None
        ready = select.select([listener], [], [], 0.05 if status is None else 0)[0]
        if ready:
            relay.accept(listener)
        elif status is not None:
            break
    relay.close(status)
    os._exit(0)


class Relay:
    """The supervisor's side of the channel: the records it took and what it wrote to the host."""

    def __init__(self, child, nonce, dumps):
        import ast

        self.child, self.nonce, self.dumps, self.literal = child, nonce, dumps, ast.literal_eval
        self.began = self.finished = False
        self.records = 0

    def emit(self, record):
        _write_all(1, (self.nonce + " " + self.dumps(record, sort_keys=True) + "\n").encode("utf-8"))

    def accept(self, listener):
        conn, _ = listener.accept()
        data, pid = b"", None
        try:
            conn.settimeout(10)
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid = struct.unpack("3i", creds)[0]
            while len(data) <= MAX_RECORD:
                chunk = conn.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
        except OSError as exc:
            return self.forged("a record could not be read (%s)" % exc)
        finally:
            conn.close()
        if pid != self.child:
            return self.forged("process %s, not the test process, wrote on the result channel" % pid)
        self.take(data)

    def take(self, data):
        self.records += 1
        try:
            record = self.literal(data.decode("utf-8")) if len(data) <= MAX_RECORD else None
        except Exception:
            record = None
        if not well_formed(record) or self.records > MAX_RECORDS or self.finished:
            return self.forged("a malformed or late record: %r" % data[:80])
        kind = next(k for k in KINDS if k in record)
        if kind == "ready":
            self.began = True
            return self.emit({"begin": record["ready"]})
        if not self.began and kind not in ("crash", "unsupported"):
            return self.forged("a %s record before the test process was ready" % kind)
        self.finished = kind == "finished"
        if not self.finished:
            self.emit(record)

    def forged(self, why):
        self.emit({"forged": why} if self.began else {"crash": why})

    def close(self, status):
        if self.finished and status == 0:
            self.emit({"end": self.records})
        elif self.began:
            self.emit({"crash": "the test process ended before its final report (%s)" % _status(status)})


def _status(status):
    if status is None:
        return "unknown"
    if os.WIFSIGNALED(status):
        return "killed by signal %d" % os.WTERMSIG(status)
    return "exit code %d" % os.WEXITSTATUS(status)


def well_formed(record):
    """A dict of at most 3 exact-``str`` keys naming one kind, with exact ``str``/``int``/``list[str]`` values."""
    return _make_checker()(record)


def _make_checker():
    type_, len_, dict_, list_, str_, int_, kinds = type, len, dict, list, str, int, KINDS

    def well_formed(record):
        if type_(record) is not dict_ or len_(record) > 3:
            return False
        named = False
        for key, value in list_(record.items()):
            if type_(key) is not str_:
                return False
            named = named or key in kinds
            if type_(value) is list_:
                for item in value:
                    if type_(item) is not str_:
                        return False
            elif type_(value) is not str_ and type_(value) is not int_:
                return False
        return named

    return well_formed


class Reporter:
    """The test process's side of the channel: ``send(record)`` writes one record to the supervisor."""

    def __init__(self, address, raw_fd, nonce):
        self.address = address
        self.send = _make_sender(address, raw_fd, nonce)


def _make_sender(address, raw_fd=None, nonce=None):
    """``send(record)``: a connection of its own per record (with ``raw_fd``: the old in-process channel)."""
    import _socket
    import json

    sock_type, family, kind = _socket.socket, _socket.AF_UNIX, _socket.SOCK_STREAM
    checker, repr_, encode, dumps, error = _make_checker(), repr, str.encode, json.dumps, ValueError
    write_all = _write_all

    def send(record):
        if not checker(record):
            raise error("not a record")
        if raw_fd is not None:
            if "ready" in record:
                record = {"begin": record["ready"]}
            elif "finished" in record:
                record = {"end": record["finished"]}
            return write_all(raw_fd, encode(nonce + " " + dumps(record, sort_keys=True) + "\n", "utf-8"))
        conn = sock_type(family, kind)
        try:
            conn.connect(address)
            conn.sendall(encode(repr_(record), "utf-8"))
        finally:
            conn.close()

    return send


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
    ``finish`` sends the findings and ``finished``. Once ``install``ed, each is a request to the audit hook, which holds
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

    def install(self, trusted_code):
        """Add the audit hook (Python >= 3.8) around the runner's ``trusted_code``; why not, or ``None``."""
        not_dumpable()
        if "audit" in self.off:
            return "the audit hook is off (defences_off)"
        if sys.version_info < (3, 8):
            return "Python %d.%d has no audit hooks" % sys.version_info[:2]
        for name, function in _install(self, trusted_code).items():
            setattr(self, name, function)
        return None


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


def _install(kernel, trusted_code):
    """Add the audit hook. Every name its code uses is bound here, before any repository code runs: the
    runner's namespace can be changed by code under test, these locals cannot."""
    import _imp
    import _signal
    import _thread
    import importlib.machinery
    import threading
    import types

    getframe, get_ident, modules = sys._getframe, _thread.get_ident, sys.modules
    type_, id_, len_, callable_, getattr_, list_ = type, id, len, callable, getattr, list
    str_, bytes_, int_, issubclass_, type_type, open_ = str, bytes, int, issubclass, type, open
    refusal, os_error, type_error, object_repr, as_int = (
        RuntimeError,
        OSError,
        TypeError,
        object.__repr__,
        int.__index__,
    )

    def text(value):
        return value[-2000:] if type_(value) is str_ else "<not text>"

    startswith, endswith, split, join, decode = (
        str.startswith,
        str.endswith,
        str.split,
        str.join,
        bytes.decode,
    )
    lower = str.lower
    getcwd, readlink = os.getcwd, os.readlink
    guarded, frame_attrs, near_events, any_events = GUARDED, FRAME_ATTRS, NEAR_EVENTS, ANY_EVENTS
    thread_starts, framework, near, runner_name = THREAD_STARTS, FRAMEWORK, NEAR, RUNNER_NAME
    stdlib = os.path.dirname(os.__file__) + "/"
    module_type, code_type, method_type = type(sys), types.CodeType, types.MethodType
    spec_type, thread_class = importlib.machinery.ModuleSpec, threading.Thread
    type_module = type.__dict__["__module__"].__get__
    agent_files, address = kernel.agent_files, kernel.reporter.address
    send = _make_sender(address)
    send_code = send.__code__
    core = _make_core(send, agent_files)
    note = core["note"]
    served = {"cascade." + name: core[name] for name in SERVED}
    api, ask_code = _requests(sys.audit)
    main_ident, bootstrap_code = get_ident(), thread_class._bootstrap.__code__
    trusted_ids = {id_(code): code for code in [*list_(trusted_code), ask_code]}
    untrusted_codes, untrusted_names, trusted_threads, busy = {}, set(), {}, {}
    depth = [0]  # signal handlers of untrusted code running now
    own = {"signal": _signal.signal, "getsignal": _signal.getsignal, "create_builtin": _imp.create_builtin}
    handlers = {}

    def untrusted_frame(frame):
        code = frame.f_code
        if id_(code) in trusted_ids:
            return None
        name = code.co_filename
        if id_(code) in untrusted_codes or name in agent_files or name in untrusted_names:
            return name
        return None

    def untrusted(frame, nearest=None, thread=True):
        """Where untrusted code is on the stack from ``frame`` (its ``nearest`` frames, or all), or why the
        thread is (``thread``: one the runner did not see started by trusted code), or ``None``."""
        if depth[0]:
            return "a signal handler registered by untrusted code"
        main, bottom, n = get_ident() == main_ident, None, 0
        while frame is not None:
            if nearest is None or n < nearest:
                where = untrusted_frame(frame)
                if where:
                    return where
            elif main or not thread:
                return None
            bottom, frame, n = frame, frame.f_back, n + 1
        if not main and thread:
            owner = (
                bottom.f_locals.get("self")
                if bottom is not None and bottom.f_code is bootstrap_code
                else None
            )
            if owner is None or trusted_threads.get(id_(owner)) is not owner:
                return "a thread not started by trusted code"
        return None

    def hands_frames_out(code):
        """A function that may give a frame to its caller (``inspect.stack``, ``traceback.walk_tb``...)."""
        name = lower(code.co_name)
        return "frame" in name or "stack" in name or "trace" in name or "tb" in name

    def frame_refusal(frame, thread):
        """Why a frame may not be had here: the code asking is untrusted, or it hands frames out and its
        callers within ``near`` are (``thread``: a thread of untrusted code may have none at all)."""
        where = untrusted(frame, 1, thread)
        if not where and hands_frames_out(frame.f_code):
            where = untrusted(frame.f_back, near - 1, False)
        return where

    def refuse(what, where, kind="refused"):
        note(kind, "%s from %s" % (what, where))
        raise refusal("refused by the SWE grader: %s (from %s)" % (what, where))

    def mark(code):
        todo = [code]
        while todo:
            item = todo.pop()
            if type_(item) is code_type and id_(item) not in untrusted_codes:
                untrusted_codes[id_(item)] = item
                todo.extend(item.co_consts)

    def resolve(path):
        """``path`` with its symbolic links resolved by hand (relative to the working directory)."""
        parts = split(path if startswith(path, "/") else getcwd() + "/" + path, "/")
        done, links = [], 0
        while parts and links <= 40:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                done = done[:-1]
                continue
            try:
                target = readlink("/" + join("/", [*done, part]))
            except os_error:
                done.append(part)
                continue
            links += 1
            parts = split(target, "/") + parts
            if startswith(target, "/"):
                done = []
        return "/" + join("/", done)

    def protected(cls):
        """A class of the standard library, a test framework or the runner: not the agent's to change."""
        module = type_module(cls)
        if type_(module) is not str_ or startswith(module, framework):
            return True
        owner = modules.get(module)
        path = owner.__dict__.get("__file__") if type_(owner) is module_type else None
        return type_(path) is not str_ or (startswith(path, stdlib) and "-packages/" not in path)

    def on_compile(frame, source, name):
        where = untrusted(frame, near)
        if not where:
            return
        if type_(name) is not str_ or startswith(name, runner_name) or startswith(name, "<frozen"):
            refuse(
                "compiling code named %s" % (name if type_(name) is str_ else type_(name)), where, "tampered"
            )
        if startswith(name, "<"):
            untrusted_names.add(name)
            return
        if name in agent_files:
            return
        if type_(source) is str_:
            source = source.encode("utf-8")
        if type_(source) is not bytes_:
            if endswith(frame.f_code.co_filename, "_pytest/assertion/rewrite.py"):
                return  # pytest compiles a test module's rewritten tree under its own name
            refuse("compiling a tree under the name of %s" % name, where, "tampered")
        try:
            with open_(name, "rb") as f:
                matches = f.read() == source
        except os_error:
            matches = False
        if not matches:
            refuse("compiling code under the name of %s, which is not its source" % name, where, "tampered")

    def on_signal(frame, signum, handler):
        installed = handler
        if callable_(handler) and untrusted(frame):

            def installed(number, _frame):
                depth[0] += 1
                try:
                    return handler(number, None)
                finally:
                    depth[0] -= 1

        previous = own["signal"](signum, installed)
        previous = handlers.pop(signum, previous)
        if installed is not handler:
            handlers[signum] = handler
        return previous

    def channel_connect(frame, target):
        """A connection to the result channel: only the kernel's own sender, inside the hook."""
        if type_(target) is bytes_:
            target = decode(target, "latin-1")
        if type_(target) is not str_ or target != address:
            return
        above = frame.f_back
        inside = above is not None and above.f_back is not None and above.f_back.f_code is serve_code
        if frame.f_code is not send_code or not inside:
            refuse("connecting to the result channel", "code other than the runner's", "tampered")

    def dispatch(frame, event, args):
        if event == "object.__getattr__" or event in near_events:
            # A thread's own stack (sys._getframe) leads nowhere else; a traceback or generator may.
            where = frame_refusal(frame, event != "sys._getframe")
            if where:
                refuse("reading a frame (%s)" % args[1] if event == "object.__getattr__" else event, where)
        elif event in any_events or startswith(event, "ctypes."):
            where = untrusted(frame)
            if where:
                refuse(event, where)
        elif event == "object.__setattr__" or event == "object.__delattr__":
            target, name = args[0], args[1]  # audited: a function's __code__, a class's special attributes
            if name == "__code__" or (
                name == "__bases__" and issubclass_(type_(target), type_type) and protected(target)
            ):
                where = untrusted(frame)
                if where:
                    what = "setting %s on %s" % (name, object_repr(target))
                    refuse(what, where, "refused" if name == "__code__" else "tampered")
        elif event == "compile":
            on_compile(frame, args[0], args[1])
        elif event == "exec":
            if not startswith(frame.f_code.co_filename, "<frozen importlib") and untrusted(frame, near):
                mark(args[0])
        elif event == "open":
            path = decode(args[0], "latin-1") if type_(args[0]) is bytes_ else args[0]
            if type_(path) is str_ and endswith(resolve(path), "/mem"):
                where = untrusted(frame)
                if where:
                    refuse("opening %s" % path, where)
        elif event == "socket.connect":
            channel_connect(frame, args[1])
        elif event in thread_starts:
            owner = args[0].__self__ if type_(args[0]) is method_type else None
            if owner is not None and issubclass_(type_(owner), thread_class) and not untrusted(frame):
                trusted_threads[id_(owner)] = owner
        else:
            serve(frame, event, args)

    def serve(frame, event, args):
        """A request from ``_requests``' functions: answered only for the runner's own code (or, for the
        swapped-in library functions, with the agent's limits applied)."""
        box = args[-1]
        if type_(box) is not list_ or len_(box):
            return
        if event == "cascade.signal" or event == "cascade.getsignal":
            if not issubclass_(type_(args[0]), int_):
                raise type_error("signal number must be an integer")
            signum = as_int(args[0])  # an IntEnum's value, through int's own slot (no method of a subclass)
            if event == "cascade.signal":
                return box.append(on_signal(frame, signum, args[1]))
            return box.append(handlers.get(signum) or own["getsignal"](signum))
        if event == "cascade.create_builtin":
            spec = args[0]
            if type_(spec) is not spec_type or type_(spec.name) is not str_:
                refuse("creating a built-in module from %s" % type_(spec), "untrusted code")
            if spec.name in modules and untrusted(frame):
                refuse("a second instance of the built-in module %s" % spec.name, untrusted(frame))
            return box.append(own["create_builtin"](spec))
        where, caller = untrusted(frame), frame.f_back
        if where or caller is None or id_(caller.f_code) not in trusted_ids or get_ident() != main_ident:
            refuse(
                "a request to the runner's kernel (%s)" % event,
                where or "code other than the runner's",
                "tampered",
            )
        if event == "cascade.flag":
            box.append(note("tampered", text(args[0])))
        else:
            box.append(served[event](*args[:-1]))

    def hook(event, args):
        if type_(event) is not str_ or event not in guarded:
            return
        if event == "object.__getattr__" and (type_(args[1]) is not str_ or args[1] not in frame_attrs):
            return
        ident = get_ident()
        before = busy.get(ident)
        if before == "reading the stack":
            return  # the hook's own getframe below: nothing of the agent's runs in between
        busy[ident] = "reading the stack"
        try:
            frame = getframe(1)
            busy[ident] = "deciding"
            dispatch(frame, event, args)
        finally:
            if before is None:
                del busy[ident]
            else:
                busy[ident] = before

    serve_code = serve.__code__
    start_thread = getattr(threading, "_start_new_thread", None)

    def start_new_thread(function, args, kwargs=None, _audit=sys.audit, _start=start_thread):
        _audit("cascade.thread", function)
        return _start(function, args, kwargs or {})

    swaps = {id_(own["signal"]): api["signal"], id_(own["getsignal"]): api["getsignal"]}
    for module in list_(modules.values()):
        space = getattr_(module, "__dict__", None)
        for name, value in list_(space.items()) if type_(space) is dict else ():
            if id_(value) in swaps:
                space[name] = swaps[id_(value)]
            elif id_(getattr_(value, "__wrapped__", None)) in swaps:
                value.__wrapped__ = swaps[id_(value.__wrapped__)]
    _imp.create_builtin = api["create_builtin"]
    if sys.version_info < (3, 12) and start_thread is not None:
        threading._start_new_thread = start_new_thread
        trusted_ids[id_(start_new_thread.__code__)] = start_new_thread.__code__
    sys.addaudithook(hook)
    return {name: api[name] for name in (*SERVED, "flag")}
