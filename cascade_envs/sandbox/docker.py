"""The ``docker`` backend (docker SDK): one container per session, for production and SWE images.

The container runs the same agent as the other backends (so ``python3`` must be in the image),
read-only, without network unless asked, with no capabilities, ``no-new-privileges``, a PID
limit, a memory limit and size-capped tmpfs work and temp dirs. The agent's stdin/stdout travel over
the attach socket, whose stdout/stderr frames are de-multiplexed here.

Workspace mode (``workspace.py``): the container comes from ``workspace.image`` and works in
``workspace.workdir``. With a ``source`` tree that dir is a size-capped tmpfs the tree is copied
into and the root stays read-only; without one the repository is the image's own (SWE-bench
images keep it at ``/testbed``), so the root is writable (the container's own layer, removed with
it) and commands run as ``workspace_user`` (default ``root``, as those images expect; still with no
capabilities, ``no-new-privileges``, no network, the PID and memory limits).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from .base import STREAM_LIMIT, Launch, Sandbox, Session, agent_source
from .workspace import Workspace

WORKDIR = "/sandbox"
HEADER = struct.Struct(">BxxxI")


def demux(buffer: bytearray) -> tuple[list[tuple[int, bytes]], bytearray]:
    """Split Docker's multiplexed attach stream into ``(stream, payload)`` frames (1 stdout, 2 stderr).

    Returns the complete frames and the unconsumed rest of ``buffer``.
    """
    frames = []
    while len(buffer) >= HEADER.size:
        stream, size = HEADER.unpack_from(buffer)
        if len(buffer) < HEADER.size + size:
            break
        frames.append((stream, bytes(buffer[HEADER.size : HEADER.size + size])))
        del buffer[: HEADER.size + size]
    return frames, buffer


class DockerSession(Session):
    """A session whose agent runs as a container's main process."""

    sandbox: DockerSandbox

    async def _open(self) -> None:
        import docker

        sb = self.sandbox
        ws = self.workspace
        image, tmpfs, read_only, volumes = sb.image, {WORKDIR: f"size={sb.workdir_mb}m,mode=1777"}, True, {}
        if ws is not None:
            image = ws.image or sb.image
            # a source tree goes into a tmpfs; without one the repository is the image's own (writable root)
            tmpfs = {ws.workdir: f"size={ws.workdir_mb}m,mode=1777"} if ws.source is not None else {}
            read_only = ws.source is not None
            volumes = {m.source: {"bind": m.target, "mode": "rw" if m.writable else "ro"} for m in ws.mounts}
        client = await asyncio.to_thread(docker.from_env)
        self.container = await asyncio.to_thread(
            client.containers.create,
            image,
            command=self.launch.argv,
            stdin_open=True,
            network_disabled=not self.launch.network,
            mem_limit=f"{sb.container_memory_mb}m",
            pids_limit=self.defaults["nproc"],
            nano_cpus=int(sb.cpus * 1e9),
            read_only=read_only,
            tmpfs={**tmpfs, "/tmp": "size=64m,mode=1777"},
            volumes=volumes,
            user=f"{sb.run_as or 65534}:{sb.run_as or 65534}" if read_only else sb.workspace_user,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            working_dir=self.launch.workdir,
        )
        socket = await asyncio.to_thread(
            self.container.attach_socket, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        await asyncio.to_thread(self.container.start)
        raw = getattr(socket, "_sock", socket)
        raw.setblocking(False)
        stream_reader, self._writer = await asyncio.open_connection(sock=raw, limit=STREAM_LIMIT)
        self._reader = asyncio.StreamReader(limit=STREAM_LIMIT)
        self._stderr = bytearray()
        self._pump = asyncio.create_task(self._demux_loop(stream_reader))

    async def _demux_loop(self, source: asyncio.StreamReader) -> None:
        pending = bytearray()
        while chunk := await source.read(1 << 16):
            pending += chunk
            frames, pending = demux(pending)
            for stream, payload in frames:
                if stream == 2:
                    self._stderr = (self._stderr + payload)[-4096:]
                else:
                    self._reader.feed_data(payload)
        self._reader.feed_eof()

    async def _stderr_tail(self) -> str:
        return bytes(getattr(self, "_stderr", b"")).decode(errors="replace").strip() or "(no error output)"

    def _kill(self) -> None:
        container = getattr(self, "container", None)
        if container is not None:
            with contextlib.suppress(Exception):
                container.kill()

    async def _terminate(self) -> None:
        container = getattr(self, "container", None)
        self.container = None
        if container is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(container.remove, force=True)


class DockerSandbox(Sandbox):
    """Docker containers; ``image`` must provide ``python3`` (and compilers the tasks need)."""

    name = "docker"
    session_class = DockerSession

    def __init__(self, *, image: str = "python:3.11-slim", cpus: float = 1.0, container_memory_mb: int = 2048,
                 workdir_mb: int = 256, workspace_user: str = "root", **kwargs: Any):
        kwargs.setdefault("python", "python3")
        super().__init__(**kwargs)
        self.image, self.cpus, self.workspace_user = image, cpus, workspace_user
        self.container_memory_mb, self.workdir_mb = container_memory_mb, workdir_mb
        self.run_as = kwargs.get("run_as") or 65534

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            import docker
        except ImportError:
            return "the docker SDK is not installed: pip install 'cascade-envs[swe]'"
        try:
            docker.from_env(timeout=5).ping()
        except Exception as exc:
            return f"no Docker daemon reachable: {type(exc).__name__}: {exc}"
        return None

    def _launch(self, network: bool) -> Launch:
        # The agent is the container's main process (PID 1 of its PID namespace): nothing it runs can signal it.
        return Launch([self.python, "-I", "-S", "-c", agent_source(), WORKDIR], WORKDIR, network=network,
                      agent_protected=True)

    def _launch_workspace(self, network: bool, workspace: Workspace) -> Launch:
        """One container of ``workspace.image`` (or the sandbox's) working in ``workspace.workdir``."""
        return Launch([self.python, "-I", "-S", "-c", agent_source(), workspace.workdir], workspace.workdir,
                      network=network, agent_protected=True)
