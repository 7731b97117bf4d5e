"""The in-sandbox agent: a tiny server that runs commands inside one sandbox.

It is started once per session (``python3 -I -S -c <this file's source> <workdir> [<options>]``)
inside the isolation a backend provides, and serves requests on its stdin/stdout until told to exit:

- ``{"op": "write", "files": {path: (data, mode)}}`` writes files under the work dir;
- ``{"op": "read", "path": p, "limit": n}`` reads a file back (e.g. a compiled binary);
  both walk the path one directory at a time without following a symlink, open the file
  non-blocking and refuse anything but a regular file, so a link planted by a command cannot
  redirect them and a FIFO cannot stall them;
- ``{"op": "run", "argv": [...], "stdin": b"...", "timeout_s": t, "memory_mb": m, ...}`` runs one
  command with rlimits, a wall-clock deadline and capped output.

Requests come from the (trusted) host as length-prefixed ``marshal`` data; answers go back in a
fixed binary layout that the host parses with ``struct`` alone (see ``protocol.py``), so nothing the
sandbox sends is ever unpickled or evaluated. Only builtin, already-loaded modules are imported: the
agent starts in a few milliseconds, so one sandbox per response (not per test) is cheap.

The agent never sees expected outputs: results are judged outside the sandbox. When it is PID 1 of
its own PID namespace it kills every leftover process (background jobs, daemons, zombies) after each
command, cannot be killed from inside, and its exit takes the whole namespace with it.

``<options>`` (comma-separated, from the backend) say what else the agent owns:

- ``account=/a:/b``: mount points private to this sandbox and held in RAM (tmpfs). What a command
  writes there, with the System V objects it creates (``ipc``) and the resident memory of all its
  processes (as PID 1; else of its main process), counts against its ``memory_mb``: over it, the
  command is killed and reported as ``"memory"`` (checked every 20 ms while it runs, and when it
  ends, on top of each process's own ``RLIMIT_AS`` of ``memory_mb``).
- ``ipc``: the sandbox has its own IPC namespace: System V objects are removed after each command,
  like leftover processes.
- ``dropcaps``: drop every capability for good before serving (``unshare --map-root-user`` makes the
  agent root of its user namespace; the programs it runs must not be).
"""

import _signal as signal  # the C module: `signal` would pull in enum & co. at start-up
import marshal
import os
import resource
import select
import struct
import sys
import time

MEMORY_MARKERS = (b"MemoryError", b"std::bad_alloc", b"Cannot allocate memory", b"out of memory")
CHUNK = 1 << 16
HEAD = struct.Struct("!I")
RESULT = struct.Struct("!idddB")
OK, ERROR, RESULT_KIND = 0, 1, 2
SIGNAL_NAMES = {
    getattr(signal, n): n
    for n in (
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGILL",
        "SIGKILL",
        "SIGPIPE",
        "SIGSEGV",
        "SIGSYS",
        "SIGTERM",
        "SIGTRAP",
        "SIGXCPU",
        "SIGXFSZ",
    )
}


OPTIONS: "dict[str, str]" = {}
ACCOUNT: "tuple[str, ...]" = ()
CHECK_S = 0.02
PAGE = resource.getpagesize()
LIBC = None


def _libc():
    global LIBC
    if LIBC is None:
        import ctypes

        LIBC = ctypes.CDLL(None, use_errno=True)
    return LIBC


def _nondumpable():
    """Hide our /proc entries (fds, memory) from the programs we run, which share our uid."""
    try:  # noqa: SIM105 (contextlib would cost the agent's start-up time)
        _libc().prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def _drop_capabilities():
    """Give up every capability for good: bounding set, ambient set, then effective/permitted/inheritable.

    With the bounding set empty, even an ``execve`` as uid 0 grants nothing, so the commands we run
    cannot ptrace us, read our file descriptors, mount or raise limits.
    """
    import ctypes

    libc = _libc()
    cap = 0
    while libc.prctl(24, cap, 0, 0, 0) == 0:  # PR_CAPBSET_DROP; fails (EINVAL) past the last capability
        cap += 1
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    if cap == 0 or libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "could not drop capabilities")


def _safe_path(workdir, path):
    full = os.path.normpath(os.path.join(workdir, path))
    if os.path.isabs(path) or not (full + os.sep).startswith(workdir.rstrip(os.sep) + os.sep):
        raise ValueError("path escapes the work dir: " + repr(path))
    return full


def _blob(data):
    return HEAD.pack(len(data)) + data


NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_beneath(workdir, path, flags, create_dirs=False):
    """Open ``path`` under ``workdir`` one component at a time, never following a symlink.

    Every directory on the way is opened with ``O_NOFOLLOW`` relative to the one before, so a
    symlink anywhere in the path (``tests -> /etc``) is refused rather than followed; the file
    itself is opened non-blocking (a FIFO cannot stall us) and must be a regular file.
    """
    parts = os.path.relpath(_safe_path(workdir, path), workdir).split(os.sep)
    fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            if create_dirs:
                try:  # noqa: SIM105 (contextlib would cost the agent's start-up time)
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise ValueError("not a directory (symlinks are not followed): " + repr(path)) from exc
            os.close(fd)
            fd = sub
        try:
            target = os.open(parts[-1], flags | NOFOLLOW, 0o600, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (40, 6):  # ELOOP: a symlink; ENXIO: a FIFO without a reader
                raise ValueError("not a regular file (symlinks are not followed): " + repr(path)) from exc
            raise
    finally:
        os.close(fd)
    info = os.fstat(target)
    if (info.st_mode & 0o170000) != 0o100000:  # S_IFREG
        os.close(target)
        raise ValueError("not a regular file: " + repr(path))
    return target


def op_write(req, workdir):
    for path, (data, mode) in req["files"].items():
        fd = _open_beneath(workdir, path, os.O_WRONLY | os.O_CREAT, create_dirs=True)
        try:
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    return bytes([OK]) + _blob(b"")


def op_read(req, workdir):
    limit = int(req.get("limit", 1 << 30))
    fd = _open_beneath(workdir, req["path"], os.O_RDONLY)
    try:
        os.set_blocking(fd, True)
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, min(CHUNK << 4, limit + 1 - len(data)))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError("file larger than the read limit")
    return bytes([OK]) + _blob(data)


def _ram_bytes():
    """Bytes held by the RAM-backed mounts this sandbox owns (``account=``)."""
    total = 0
    for path in ACCOUNT:
        try:
            st = os.statvfs(path)
        except OSError:
            continue
        total += (st.f_blocks - st.f_bfree) * st.f_frsize
    return total


def _read(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        data = b""
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                return data
            data += chunk
    finally:
        os.close(fd)


SEM_BYTES = 64
"""Kernel memory per System V semaphore (a cache line): 32000 sets of 32000 would pin gigabytes."""


class _IpcInfo:
    """System V usage of our IPC namespace from ``SHM_INFO``/``MSG_INFO``/``SEM_INFO``: three syscalls."""

    def __init__(self):
        import ctypes

        self.libc = _libc()
        self.shm = (
            ctypes.c_ulong * 8
        )()  # struct shm_info: int used_ids (padded); shm_tot, shm_rss, shm_swp, ...
        self.msg = (
            ctypes.c_int * 8
        )()  # struct msginfo: msgpool, msgmap, msgmax, msgmnb, msgmni, msgssz, msgtql
        self.sem = (ctypes.c_int * 10)()  # struct seminfo: ..., semusz (7), semvmx, semaem (9)

    def __call__(self):
        """``(objects, bytes)``: how many objects exist, and the memory they hold."""
        shm, msg, sem = self.shm, self.msg, self.sem
        self.libc.shmctl(0, 14, shm)  # SHM_INFO
        self.libc.msgctl(0, 12, msg)  # MSG_INFO
        self.libc.semctl(0, 0, 19, sem)  # SEM_INFO
        objects = bool(shm[0]) + msg[0] + sem[7]  # shm[0]: used_ids, zero-padded to a long
        return objects, (shm[2] + shm[3]) * PAGE + msg[6] + sem[9] * SEM_BYTES


IPC_INFO: "list[_IpcInfo]" = []


def _ipc_info():
    if not IPC_INFO:
        IPC_INFO.append(_IpcInfo())
    return IPC_INFO[0]()


def _ipc(remove):
    """Bytes held by System V shared memory, message queues and semaphores; with ``remove``, delete them all."""
    objects, total = _ipc_info()
    if remove and objects:
        libc = _libc()
        for kind in ("shm", "msg", "sem"):
            try:
                lines = _read("/proc/sysvipc/" + kind).split(b"\n")[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                if len(fields) < 2:
                    continue
                if kind == "shm":
                    libc.shmctl(int(fields[1]), 0, None)  # IPC_RMID
                elif kind == "msg":
                    libc.msgctl(int(fields[1]), 0, None)
                else:
                    libc.semctl(int(fields[1]), 0, 0)
    return total


def _rss(pid):
    """Resident memory of ``pid``; as PID 1, of every process in the sandbox but us (the whole command)."""
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and p != "1"] if os.getpid() == 1 else [pid]
    total = 0
    for each in pids:
        try:  # noqa: SIM105
            total += int(_read(f"/proc/{each}/statm").split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            pass
    return total


def _killpg(pgid):
    try:  # noqa: SIM105 (contextlib would cost the agent's start-up time)
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
            try:  # noqa: SIM105
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


PRLIMIT = next((p for p in ("/usr/bin/prlimit", "/bin/prlimit") if os.access(p, os.X_OK)), None)
LIMIT_NAMES = {
    resource.RLIMIT_CORE: "core",
    resource.RLIMIT_CPU: "cpu",
    resource.RLIMIT_AS: "as",
    resource.RLIMIT_FSIZE: "fsize",
    resource.RLIMIT_NPROC: "nproc",
}


def _resolve(program, env):
    """The executable ``program`` names (searched on the request's PATH), or raise ``OSError``."""
    dirs = [""] if "/" in program else env.get("PATH", "/usr/bin:/bin").split(":")
    for d in dirs:
        path = os.path.join(d, program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("no executable " + repr(program))


def _spawn(argv, env, cwd, limits):
    """Start ``argv`` in its own session with pipes and rlimits; returns (pid, stdin, stdout, stderr).

    Where util-linux ``prlimit`` exists the limits are set by exec'ing through it with
    ``posix_spawn`` (vfork-fast); otherwise a forked child sets them itself (slower, same effect).
    """
    path = _resolve(argv[0], env)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        if PRLIMIT and cwd == os.getcwd():
            options = [f"--{LIMIT_NAMES[which]}={value}" for which, value in limits]
            actions = [
                (os.POSIX_SPAWN_DUP2, in_r, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, err_w, 2),
            ]
            pid = os.posix_spawn(
                PRLIMIT,
                ["prlimit", *options, "--", path, *argv[1:]],
                env,
                file_actions=actions,
                setsid=True,
                setsigdef=(signal.SIGPIPE,),
            )
        else:
            pid = os.fork()
            if pid == 0:  # the child: never returns
                try:
                    os.setsid()
                    for fd, target in ((in_r, 0), (out_w, 1), (err_w, 2)):
                        os.dup2(fd, target)
                    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                    os.chdir(cwd)
                    for which, value in limits:
                        resource.setrlimit(which, (value, value))
                    os.execve(path, [path, *argv[1:]], env)
                finally:
                    os._exit(127)
    except BaseException:
        for fd in (in_w, out_r, err_r):
            os.close(fd)
        raise
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    return pid, in_w, out_r, err_r


def _classify(status, flags, cpu_s, cpu_limit, stderr):
    if flags.get("output"):
        return "output_limit"
    if flags.get("memory"):
        return "memory"
    if flags.get("timeout"):
        return "timeout"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= cpu_limit - 0.05):
            return "cpu_time"
        if sig == signal.SIGXFSZ:
            return "file_size"
    tail = stderr[-4096:]
    if any(marker in tail for marker in MEMORY_MARKERS):
        return "memory"
    if b"File too large" in tail:  # Python ignores SIGXFSZ and raises EFBIG instead
        return "file_size"
    if os.WIFSIGNALED(status):
        return "signal:" + SIGNAL_NAMES.get(os.WTERMSIG(status), str(os.WTERMSIG(status)))
    return ""


def _result(code, wall, cpu, mem, truncated, killed_by, error, stdout, stderr):
    return (
        bytes([RESULT_KIND])
        + RESULT.pack(code, wall, cpu, mem, truncated)
        + _blob(killed_by.encode())
        + _blob(error.encode())
        + _blob(stdout)
        + _blob(stderr)
    )


def op_run(req, workdir):
    timeout = float(req.get("timeout_s", 10.0))
    out_limit = int(req.get("output_limit", 1 << 24))
    cpu_limit = max(1, int(timeout + 0.999))
    stdin = req.get("stdin") or b""
    env = req.get("env") or {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8"}
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_CPU, cpu_limit)]
    for key, which, unit in (
        ("memory_mb", resource.RLIMIT_AS, 1 << 20),
        ("file_mb", resource.RLIMIT_FSIZE, 1 << 20),
        ("nproc", resource.RLIMIT_NPROC, 1),
    ):
        if req.get(key):
            limits.append((which, int(req[key]) * unit))
    budget = int(req.get("memory_mb") or 0) << 20
    ipc = "ipc" in OPTIONS and os.getpid() == 1  # our own IPC namespace, and nothing else left alive in it
    watch = budget and (ACCOUNT or ipc)
    base = _ram_bytes() if watch else 0
    start = time.monotonic()
    try:
        pid, in_w, out_r, err_r = _spawn(req["argv"], env, _safe_path(workdir, req.get("cwd", ".")), limits)
    except OSError as exc:
        msg = f"could not start {req['argv'][0]!r}: {exc}"
        return _result(127, 0.0, 0.0, 0.0, 0, "", msg, b"", msg.encode())
    flags = {}
    outputs = {out_r: bytearray(), err_r: bytearray()}
    poller = select.poll()
    poller.register(out_r, select.POLLIN)
    poller.register(err_r, select.POLLIN)
    try:  # wakes the loop the moment the process exits (Linux >= 5.3)
        exit_fd = os.pidfd_open(pid)
        poller.register(exit_fd, select.POLLIN)
    except (AttributeError, OSError):
        exit_fd = None
    if stdin:
        os.set_blocking(in_w, False)
        poller.register(in_w, select.POLLOUT)
    else:
        os.close(in_w)
        in_w = None
    view, status, usage = memoryview(stdin), None, None
    deadline = start + timeout
    next_check = start + CHECK_S
    open_streams = 2
    while status is None or open_streams:
        if status is None:
            done, st, ru = os.wait4(pid, os.WNOHANG)
            if done:
                status, usage = st, ru
                if exit_fd is not None:
                    poller.unregister(exit_fd)
                    os.close(exit_fd)
                    exit_fd = None
                sweep(pid)  # background holders of our pipes die, so the reads below reach EOF
                continue
        now = time.monotonic()
        if status is None and now >= deadline:
            flags["timeout"] = True
            _killpg(pid)
        if watch and status is None and now >= next_check:
            next_check = now + CHECK_S
            if _ram_bytes() - base + (_ipc(False) if ipc else 0) + _rss(pid) > budget and not flags.get(
                "memory"
            ):
                flags["memory"] = True
                _killpg(pid)
        if status is None:
            wait = min(50.0 if exit_fd is not None else 2.0, max(0.0, deadline - now) * 1000 + 1)
            if watch:
                wait = min(wait, max(0.0, next_check - now) * 1000 + 1)
        else:
            wait = 200.0
        for fd, _ in poller.poll(wait):
            if fd == exit_fd:
                continue
            if fd == in_w:
                try:
                    written = os.write(fd, view[:CHUNK])
                except BlockingIOError:
                    written = 0
                except OSError:  # the program closed its stdin: drop the rest
                    written = len(view)
                view = view[written:]
                if not len(view):
                    poller.unregister(fd)
                    os.close(fd)
                    in_w = None
                continue
            chunk = os.read(fd, CHUNK)
            if not chunk:
                poller.unregister(fd)
                open_streams -= 1
                continue
            buf = outputs[fd]
            buf += chunk
            if len(buf) > out_limit:
                del buf[out_limit:]
                if not flags.get("output"):
                    flags["output"] = True
                    _killpg(pid)
        if status is not None and time.monotonic() > deadline + 2.0:
            break  # a stream still held open by something the sweep could not reach
    for fd in (in_w, out_r, err_r):
        if fd is not None:
            os.close(fd)
    left = _ram_bytes() - base if watch else 0
    if ipc:
        left += _ipc(True)  # counted, then removed: System V objects are leftovers, like processes
    if watch and left > budget:
        flags["memory"] = True  # what it left behind alone is over its memory limit
    wall = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime
    stdout, stderr = bytes(outputs[out_r]), bytes(outputs[err_r])
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    killed_by = _classify(status, flags, cpu, cpu_limit, stderr)
    return _result(
        code,
        wall,
        cpu,
        usage.ru_maxrss / 1024.0,
        int(bool(flags.get("output"))),
        killed_by,
        "",
        stdout,
        stderr,
    )


OPS = {"write": op_write, "read": op_read, "run": op_run}


def _read_exact(fd, n):
    data = bytearray()
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main():
    global ACCOUNT
    workdir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
    for item in (sys.argv[2] if len(sys.argv) > 2 else "").split(","):
        if item:
            key, _, value = item.partition("=")
            OPTIONS[key] = value
    ACCOUNT = tuple(p for p in OPTIONS.get("account", "").split(":") if p)
    if "dropcaps" in OPTIONS:
        _drop_capabilities()  # raises: the sandbox does not start rather than start weaker
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)  # stray writes can never corrupt the protocol stream
    os.close(null)
    _nondumpable()
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a signal that stops us is a death by that signal, never a
    # KeyboardInterrupt exit: where a program can signal us (no PID namespace) the host then blames it
    _write_all(proto_out, bytes([OK]) + _blob(b"ready"))
    while True:
        head = _read_exact(proto_in, HEAD.size)
        if head is None:
            break
        body = _read_exact(proto_in, HEAD.unpack(head)[0])
        if body is None:
            break
        try:
            req = marshal.loads(body)
            if req.get("op") == "exit":
                break
            answer = OPS[req["op"]](req, workdir)
        except Exception as exc:
            answer = bytes([ERROR]) + _blob(f"{type(exc).__name__}: {exc}".encode())
        _write_all(proto_out, answer)


if __name__ == "__main__":
    main()
