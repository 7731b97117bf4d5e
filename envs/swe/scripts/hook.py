"""The kernel's audit hook (``kernel.py`` says what it refuses). One function, ``install_hook``: every name
the hook's code uses is bound there, before any repository code runs, since code under test can
rebind the program's globals (a test checks that the hook's code looks up none). Part of the program
the sandbox runs (``scripts/__init__.py``); Python >= 3.8.
"""

import os
import sys

from .kernel import (
    ANY_EVENTS,
    FRAME_ATTRS,
    FRAMEWORK,
    GUARDED,
    NEAR,
    NEAR_EVENTS,
    RUNNER_NAME,
    SERVED,
    THREAD_STARTS,
    _make_core,
    _requests,
)
from .supervisor import _make_sender, not_dumpable


def install(kernel, trusted_code):
    """Add the audit hook (Python >= 3.8) to ``kernel`` around the runner's ``trusted_code``: its requests go
    through the hook from then on. Why not, or ``None``."""
    not_dumpable()
    if "audit" in kernel.off:
        return "the audit hook is off (defences_off)"
    if sys.version_info < (3, 8):
        return "Python %d.%d has no audit hooks" % sys.version_info[:2]
    for name, function in install_hook(kernel, trusted_code).items():
        setattr(kernel, name, function)
    return None


def install_hook(kernel, trusted_code):
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
