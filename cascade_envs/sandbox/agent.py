"""The in-sandbox agent: a tiny stdlib-only server that runs commands inside one sandbox.

It is started once per session (``python3 -c <this file's source> <workdir>``) inside the isolation
a backend provides, and speaks one JSON object per line over its stdin/stdout:

- ``{"op": "write", "files": {path: [base64, mode]}}`` writes files under the work dir;
- ``{"op": "read", "path": p, "limit": n}`` reads a file back (e.g. a compiled binary);
- ``{"op": "run", "argv": [...], "stdin": b64, "timeout_s": t, "memory_mb": m, ...}`` runs one command
  with rlimits, a wall-clock deadline and capped output, and answers with an ``ExecResult`` dict.

Compiling once and running many tests therefore costs one sandbox start per response, not per test.
The agent never sees expected outputs: results are judged outside the sandbox. When it is PID 1 of
its own PID namespace it also kills every leftover process (background jobs, daemons, zombies)
after each command, and its own death takes the whole namespace with it.
"""

import base64
import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import time

MEMORY_MARKERS = (b"MemoryError", b"std::bad_alloc", b"Cannot allocate memory", b"out of memory")
CHUNK = 1 << 16


def _nondumpable():
    """Hide our /proc entries (fds, memory) from the programs we run, which share our uid."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def _safe_path(workdir, path):
    full = os.path.normpath(os.path.join(workdir, path))
    if os.path.isabs(path) or not (full + os.sep).startswith(workdir.rstrip(os.sep) + os.sep):
        raise ValueError("path escapes the work dir: %r" % path)
    return full


def op_write(req, workdir):
    for path, (data, mode) in req["files"].items():
        full = _safe_path(workdir, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as fh:
            fh.write(base64.b64decode(data))
        os.chmod(full, mode)
    return {"ok": True}


def op_read(req, workdir):
    with open(_safe_path(workdir, req["path"]), "rb") as fh:
        data = fh.read(int(req.get("limit", 1 << 30)) + 1)
    if len(data) > int(req.get("limit", 1 << 30)):
        return {"ok": False, "error": "file larger than the read limit"}
    return {"ok": True, "data": base64.b64encode(data).decode()}


def _limiter(memory_mb, cpu_s, file_mb, nproc):
    def apply():
        limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_CPU, cpu_s)]
        if memory_mb:
            limits.append((resource.RLIMIT_AS, memory_mb << 20))
        if file_mb:
            limits.append((resource.RLIMIT_FSIZE, file_mb << 20))
        if nproc:
            limits.append((resource.RLIMIT_NPROC, nproc))
        for which, value in limits:
            resource.setrlimit(which, (value, value))

    return apply


def _killpg(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def sweep(pgid):
    """Kill what a command left behind: its process group, and, as PID 1, every other process."""
    _killpg(pgid)
    if os.getpid() != 1:
        return
    for _ in range(50):
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != 1]
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:  # reap zombies (ours and orphans re-parented to us)
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not others:
            return
        time.sleep(0.001)


def _classify(status, flags, cpu_s, cpu_limit, stderr):
    if flags.get("output"):
        return "output_limit"
    if flags.get("timeout"):
        return "timeout"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= cpu_limit - 0.05):
            return "cpu_time"
        if sig == signal.SIGXFSZ:
            return "file_size"
    if any(marker in stderr[-4096:] for marker in MEMORY_MARKERS):
        return "memory"
    if os.WIFSIGNALED(status):
        return "signal:" + signal.Signals(os.WTERMSIG(status)).name
    return None


def op_run(req, workdir):
    timeout = float(req.get("timeout_s", 10.0))
    out_limit = int(req.get("output_limit", 1 << 24))
    cpu_limit = max(1, int(timeout + 0.999))
    stdin = base64.b64decode(req.get("stdin", ""))
    env = req.get("env") or {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8"}
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            req["argv"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=_safe_path(workdir, req.get("cwd", ".")),
            env=env,
            start_new_session=True,
            preexec_fn=_limiter(req.get("memory_mb"), cpu_limit, req.get("file_mb"), req.get("nproc")),
        )
    except OSError as exc:
        return {"exit_code": 127, "stdout": "", "stderr": base64.b64encode(str(exc).encode()).decode(),
                "wall_s": 0.0, "cpu_s": 0.0, "peak_memory_mb": 0.0, "killed_by": None,
                "error": "could not start %r: %s" % (req["argv"][0], exc)}
    flags = {}
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    outputs = {out_fd: bytearray(), err_fd: bytearray()}
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    if stdin:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    view, status, usage = memoryview(stdin), None, None
    deadline = start + timeout
    open_streams = 2
    while status is None or open_streams:
        if status is None:
            pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status, usage = st, ru
                sweep(proc.pid)  # background holders of our pipes die, so the reads below reach EOF
                continue
        now = time.monotonic()
        if status is None and now >= deadline:
            flags["timeout"] = True
            _killpg(proc.pid)
        wait = 0.05 if status is None else 0.2
        for key, _ in sel.select(min(wait, max(0.0, deadline - now)) if status is None else wait):
            fobj = key.fileobj
            if fobj is proc.stdin:
                try:
                    written = os.write(fobj.fileno(), view[:CHUNK])
                except BlockingIOError:
                    written = 0
                except OSError:  # the program closed its stdin: drop the rest
                    written = len(view)
                view = view[written:]
                if not len(view):
                    sel.unregister(fobj)
                    fobj.close()
                continue
            chunk = os.read(fobj.fileno(), CHUNK)
            if not chunk:
                sel.unregister(fobj)
                open_streams -= 1
                continue
            buf = outputs[fobj.fileno()]
            buf += chunk
            if len(buf) > out_limit and not flags.get("output"):
                flags["output"] = True
                del buf[out_limit:]
                _killpg(proc.pid)
            elif len(buf) > out_limit:
                del buf[out_limit:]
        if status is not None and time.monotonic() > deadline + 2.0:
            break  # a stream still held open by something the sweep could not reach
    sel.close()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            stream.close()
        except OSError:
            pass
    proc.returncode = 0  # reaped by us: keep Popen from waiting again
    wall = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime
    stdout, stderr = bytes(outputs[out_fd]), bytes(outputs[err_fd])
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
    else:
        code = -os.WTERMSIG(status)
    return {
        "exit_code": code,
        "stdout": base64.b64encode(stdout).decode(),
        "stderr": base64.b64encode(stderr).decode(),
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_memory_mb": usage.ru_maxrss / 1024.0,
        "killed_by": _classify(status, flags, cpu, cpu_limit, stderr),
        "truncated": bool(flags.get("output")),
    }


OPS = {"write": op_write, "read": op_read, "run": op_run}


def main():
    workdir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)  # stray writes can never corrupt the protocol stream
    for fd in (proto_in.fileno(), proto_out.fileno()):
        os.set_inheritable(fd, False)
    _nondumpable()
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    proto_out.write(b'{"ready": true, "pid": %d}\n' % os.getpid())
    proto_out.flush()
    for line in proto_in:
        try:
            req = json.loads(line)
            if req.get("op") == "exit":
                break
            resp = OPS[req["op"]](req, workdir)
        except Exception as exc:
            resp = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
        proto_out.write(json.dumps(resp).encode() + b"\n")
        proto_out.flush()


if __name__ == "__main__":
    main()
