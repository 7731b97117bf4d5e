"""The runner's two processes: the supervisor, which alone talks to the host, and the test process's
way to it. Part of the program the sandbox runs (``scripts/__init__.py``); Python 3.6 syntax.

``start()`` forks before the host's request is read:

- the supervisor (the parent) reads the request from stdin, keeps its nonce and hands the rest to
  the test process. Then it only relays: one connection per record on an abstract unix socket,
  taken only from the test process's pid (``SO_PEERCRED``), its shape checked, written to the host
  as ``<nonce> <json>``: ``begin`` when the test process is ready (no repository code imported
  yet), ``end`` only after it sent ``finished`` and exited 0. It runs no repository code and is
  non-dumpable (no ptrace, no ``/proc/<pid>/{mem,fd}`` for other processes of its user);
- the test process never holds the nonce nor a descriptor of the host's pipes (0, 1 and 2 are
  ``/dev/null``), and is non-dumpable too. Knowing the nonce is not enough to forge: a record
  counts only when the test process's kernel sends it (``kernel.py``, ``hook.py``).
"""

import os
import socket
import struct

MAX_RECORD = 1 << 16
MAX_RECORDS = 100000
KINDS = ("ready", "test", "collect_error", "tampered", "refused", "crash", "unsupported", "finished")


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
