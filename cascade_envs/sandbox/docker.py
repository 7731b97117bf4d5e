"""The ``docker`` backend (docker SDK): one container per session, for production and SWE images.

Every container runs the same agent as the other backends (so ``python3`` must be in the image)
as PID 1, with the same per-command accounting as ``bwrap`` (what a command writes to the work
dir, ``/tmp`` and ``/dev/shm`` and the memory of all its processes count against its
``memory_mb``; System V objects are removed after it). The container itself: a read-only root,
size-capped tmpfs work dir, ``/tmp`` and ``/dev/shm`` (the only writable places), no network unless
asked, no capabilities, ``no-new-privileges``, uid ``run_as`` (65534; ``workspace_user``, root, in
workspace mode), a PID limit, a memory limit (which also holds the tmpfs mounts), CPU shares, and
``--rm``: the daemon removes it (with any anonymous volume its image declares) as soon as the agent
exits, even when the host process that started it dies or the daemon restarts. The agent's stdin/stdout travel over the attach socket,
whose stdout/stderr frames are de-multiplexed here.

Images are never pulled: a missing one is a ``SandboxError`` at session start naming the command
that builds it (``images.build_hint``). Every daemon call is bounded by ``api_timeout_s``; a
daemon that is down or goes away is a ``SandboxError`` (start) or a lost session (mid-command).

Workspace mode (``workspace.py``): the container comes from ``workspace.image`` (or the
sandbox's) and works in ``workspace.workdir``, a tmpfs of ``workspace.workdir_mb``. What the image
holds at that path (a SWE instance image's repository at ``/testbed``) is copied in when the session
starts (read from the container before it runs, unpacked with the image's ``tar``), or, with a
``workspace.source``, that tree instead; so commands write nowhere else, the image is never
changed, and what they write is bounded and held in RAM. Workspace sessions run as
``workspace_user`` (root without capabilities, as SWE images expect: a tmpfs over a directory the
image has keeps that directory's owner and mode). ``workspace.mounts`` are bind mounts; ``root``
is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import socket
import struct
import time
from collections.abc import Mapping
from typing import Any

from .base import STREAM_LIMIT, Launch, Sandbox, Session, agent_source
from .images import SANDBOX_IMAGE, build_hint, client
from .results import SandboxError
from .workspace import Workspace

log = logging.getLogger("cascade_envs.sandbox")

WORKDIR = "/sandbox"
HEADER = struct.Struct(">BxxxI")
LABEL = "cascade-envs.sandbox"
"""Label of every container this backend starts, valued ``<host>:<pid>`` of the process that started it
(``docker ps --filter label=cascade-envs.sandbox``)."""
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?"
REFERENCE = re.compile(
    rf"{_HOST}{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?(?:@sha256:[a-f0-9]{{64}})?"
    r"|sha256:[a-f0-9]{64}"
)
"""Docker's image reference grammar: anything else (spaces, ``;``, ``$``, quotes) is refused before any call."""


def check_image(name: str) -> str:
    """``name`` if it is a well-formed image reference, else ``SandboxError`` naming it."""
    if not isinstance(name, str) or len(name) > 255 or not REFERENCE.fullmatch(name):
        raise SandboxError(f"{name!r} is not a valid docker image name")
    return name


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


def _daemon_error(exc: BaseException) -> str:
    """A docker SDK or transport error in one line."""
    text = getattr(exc, "explanation", None) or str(exc)
    return f"{type(exc).__name__}: {' '.join(str(text).split())}"[:600]


class DockerSession(Session):
    """A session whose agent runs as a container's main process."""

    sandbox: DockerSandbox
    container: Any = None
    _creating: asyncio.Future[Any] | None = None
    _api: Any = None
    _name = ""
    _attached: Any = None
    _archive: bytes | None = None
    _pump: asyncio.Task[None] | None = None

    async def start(self) -> Session:
        """Start the container; copy what the image holds at the workspace's workdir into its tmpfs."""
        await super().start()
        if self._archive:
            archive, self._archive = self._archive, None
            limit = self.workspace.workdir_mb if self.workspace is not None else 0
            unpacked = await self.arun(
                ["tar", "-x", "--no-same-owner", "--strip-components=1", "-f", "-"],
                archive,
                timeout_s=max(60.0, len(archive) / 20e6),
                file_mb=limit,
                cwd=".",
            )
            if not unpacked.ok:
                await self.aclose()
                raise SandboxError(
                    f"docker sandbox did not start: the image's {self.workdir} could not be copied "
                    f"into the work dir (its cap: {limit} MB; a larger tree needs the workspace's "
                    f"workdir_mb raised): {unpacked.describe()}"
                )
        return self

    async def _open(self) -> None:
        sb, ws = self.sandbox, self.workspace
        image = check_image(ws.image if ws is not None and ws.image else sb.image)
        workdir_mb = ws.workdir_mb if ws is not None else sb.workdir_mb
        if workdir_mb + sb.tmp_mb + sb.shm_mb + 64 > sb.container_memory_mb:
            raise SandboxError(
                f"docker sandbox: container_memory_mb={sb.container_memory_mb} cannot hold its tmpfs "
                f"mounts (work dir {workdir_mb} MB, /tmp {sb.tmp_mb} MB, /dev/shm {sb.shm_mb} MB) "
                "and the agent: raise it or lower the caps"
            )
        daemon = await sb.aclient()
        volumes = (
            {m.source: {"bind": m.target, "mode": "rw" if m.writable else "ro"} for m in ws.mounts}
            if ws
            else {}
        )
        options = dict(
            command=self.launch.argv,
            stdin_open=True,
            auto_remove=True,  # not detached: StdinOnce
            network_disabled=not self.launch.network,
            mem_limit=f"{sb.container_memory_mb}m",
            memswap_limit=f"{sb.container_memory_mb}m",
            pids_limit=int(self.defaults["nproc"]) + 8,
            nano_cpus=int(sb.cpus * 1e9),
            read_only=True,
            cap_drop=["ALL"],
            user=sb.workspace_user if ws is not None else f"{sb.run_as}:{sb.run_as}",
            security_opt=["no-new-privileges"],
            shm_size=f"{sb.shm_mb}m",
            ipc_mode="private",
            hostname="sandbox",
            # exec: compiled programs run from the work dir; no working_dir: the daemon would make it root's 0755
            tmpfs={
                self.launch.workdir: f"size={workdir_mb}m,mode=1777,exec",
                "/tmp": f"size={sb.tmp_mb}m,mode=1777,exec",
            },
            volumes=volumes,
            environment=self.launch.env,
            labels={LABEL: f"{socket.gethostname()}:{os.getpid()}", **sb.labels},
        )
        import docker.errors

        self._api = daemon.api
        self._name = (
            f"cascade-sandbox-{secrets.token_hex(8)}"  # removable by name even if this start is cancelled
        )
        self._creating = asyncio.ensure_future(
            asyncio.to_thread(daemon.containers.create, image, name=self._name, **options)
        )
        try:
            self.container = await asyncio.shield(self._creating)
        except docker.errors.ImageNotFound:
            raise SandboxError(f"docker image {image!r} is not here: {build_hint(image)}") from None
        except Exception as exc:
            raise SandboxError(f"docker sandbox did not start: {_daemon_error(exc)}") from None
        try:
            if ws is not None and ws.source is None:
                self._archive = await asyncio.to_thread(
                    self._image_tree, self.container, ws.workdir, ws.workdir_mb
                )
            attached = await asyncio.to_thread(
                self.container.attach_socket, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            await asyncio.to_thread(self.container.start)
        except SandboxError:
            raise
        except Exception as exc:
            why = _daemon_error(exc)
            if f'exec: "{sb.python}"' in why:
                why = f"the image {image!r} has no {sb.python} for the sandbox agent ({why})"
            raise SandboxError(f"docker sandbox did not start: {why}") from None
        raw = getattr(attached, "_sock", attached)
        raw.setblocking(False)
        stream_reader, self._writer = await asyncio.open_connection(sock=raw, limit=STREAM_LIMIT)
        if raw is not attached:
            attached.close()  # the SDK's file wrapper: the socket is the transport's now, closed with it
        self._attached = (
            self._writer
        )  # Session.aclose drops _writer before _terminate: this one is closed there
        self._reader = asyncio.StreamReader(limit=STREAM_LIMIT)
        self._stderr = bytearray()
        self._pump = asyncio.create_task(self._demux_loop(stream_reader))

    @staticmethod
    def _image_tree(container: Any, path: str, limit_mb: int) -> bytes | None:
        """The tar archive of ``path`` in the (not yet started) container's image; ``None`` when absent."""
        import docker.errors

        try:
            chunks, _ = container.get_archive(path, chunk_size=1 << 20)
            data = bytearray()
            for chunk in chunks:
                data += chunk
                if len(data) > (limit_mb + 16) << 20:
                    raise SandboxError(
                        f"docker sandbox did not start: the image's {path} holds more than the work "
                        f"dir (its cap: {limit_mb} MB; a larger tree needs the workspace's workdir_mb raised)"
                    )
            return bytes(data)
        except docker.errors.NotFound:
            return None

    async def _demux_loop(self, source: asyncio.StreamReader) -> None:
        pending = bytearray()
        try:
            while chunk := await source.read(1 << 16):
                pending += chunk
                frames, pending = demux(pending)
                for stream, payload in frames:
                    if stream == 2:
                        self._stderr = (self._stderr + payload)[-4096:]
                    else:
                        self._reader.feed_data(payload)
        except OSError:
            pass
        finally:
            self._reader.feed_eof()

    async def _stderr_tail(self) -> str:
        with contextlib.suppress(Exception):
            if self._pump is not None:
                await asyncio.wait_for(asyncio.shield(self._pump), 2.0)
        return bytes(getattr(self, "_stderr", b"")).decode(errors="replace").strip() or "(no error output)"

    def _kill(self) -> None:
        # Closing the attach socket closes the agent's stdin (stdin_once): it exits after its current
        # command and the daemon removes the container; aclose removes it at once (never a blocking call here).
        if self._attached is not None:
            with contextlib.suppress(Exception):
                self._attached.close()

    async def _terminate(self) -> None:
        self._kill()
        creating, self._creating, self.container = self._creating, None, None
        if creating is not None:  # a create still under way (a cancelled start) is waited for, then removed
            await asyncio.wait({creating}, timeout=self.sandbox.api_timeout_s)
            if not creating.cancelled():
                creating.exception()  # retrieved: the start already reported it
            await asyncio.to_thread(_remove, self._api, self._name, self.sandbox.api_timeout_s)
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(BaseException):
                await self._pump


def _remove(api: Any, name: str, timeout_s: float) -> None:
    """Remove container ``name`` and its anonymous volumes, waiting (bounded) for a removal already under way."""
    import docker.errors

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            api.remove_container(name, force=True, v=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code != 409 or time.monotonic() > deadline:  # 409: removal in progress (--rm)
                log.warning("docker container %s not removed: %s", name, _daemon_error(exc))
                return
        except (
            Exception
        ) as exc:  # the daemon is gone: it removes --rm containers when it stops or starts again
            log.warning(
                "docker container %s not removed now (%s); the daemon removes it (--rm)",
                name,
                _daemon_error(exc),
            )
            return
        time.sleep(0.05)


class DockerSandbox(Sandbox):
    """Docker containers of ``image`` (default ``cascade-sandbox:bookworm``: ``cascade-envs build-image sandbox``).

    ``image`` must provide ``python3`` (and the compilers the tasks need; ``tar`` for workspaces).
    ``container_memory_mb``: the container's memory (commands, their tmpfs files, the agent);
    ``workdir_mb``, ``tmp_mb``, ``shm_mb``: the tmpfs caps; ``cpus``: CPU shares; ``base_url``: the
    daemon (default: ``DOCKER_HOST`` or the local socket, so an actor on another node uses its own);
    ``labels``: added to every container; ``api_timeout_s``: the bound of every daemon call;
    ``workspace_user``: the user of workspace sessions (default ``0:0``, root, whose files SWE
    images' repositories are; still without capabilities); every other session runs as ``run_as``
    (65534). ``get_sandbox("docker")`` checks the default daemon (``DOCKER_HOST`` or the local socket).
    """

    name = "docker"
    session_class = DockerSession

    def __init__(
        self,
        *,
        image: str = SANDBOX_IMAGE,
        cpus: float = 1.0,
        container_memory_mb: int = 2048,
        workdir_mb: int = 256,
        tmp_mb: int = 64,
        shm_mb: int = 64,
        base_url: str | None = None,
        labels: Mapping[str, str] | None = None,
        api_timeout_s: float = 60.0,
        workspace_user: str = "0:0",
        **kwargs: Any,
    ):
        kwargs.setdefault("python", "python3")
        super().__init__(**kwargs)
        self.image = check_image(image)
        self.cpus, self.container_memory_mb = cpus, container_memory_mb
        self.workdir_mb, self.tmp_mb, self.shm_mb = workdir_mb, tmp_mb, shm_mb
        self.base_url, self.labels, self.api_timeout_s = base_url, dict(labels or {}), api_timeout_s
        self.workspace_user = workspace_user
        self.run_as = kwargs.get("run_as") or 65534
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}  # a client belongs to its process (an actor makes its own)

    async def aclient(self) -> Any:
        """This process's client of the daemon (made once; ``SandboxError`` when it cannot be reached)."""
        if self._client is None:
            try:
                self._client = await asyncio.to_thread(client, self.base_url, self.api_timeout_s)
            except SandboxError as exc:
                raise SandboxError(f"docker sandbox did not start: {exc}") from None
        return self._client

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            client(None, 5).close()
        except SandboxError as exc:
            return str(exc)
        return None

    def _launch(self, network: bool) -> Launch:
        return self._launch_in(network, WORKDIR)

    def _launch_workspace(self, network: bool, workspace: Workspace) -> Launch:
        """A container of ``workspace.image`` (or the sandbox's) whose tmpfs ``workdir`` starts with the image's tree."""
        if workspace.root is not None:
            raise SandboxError("the docker sandbox takes a workspace image, not a root directory")
        return self._launch_in(network, workspace.workdir)

    def _launch_in(self, network: bool, workdir: str) -> Launch:
        # The agent is PID 1 of the container: nothing it runs can signal it. Processes are bounded per
        # container (pids limit), not per uid: RLIMIT_NPROC would count every container's uid 65534 together.
        env = {"LANG": "C.UTF-8", "HOME": workdir}  # PATH: the image's (its python3 may live anywhere)
        argv = [
            self.python,
            "-I",
            "-S",
            "-c",
            agent_source(),
            workdir,
            f"account={workdir}:/tmp:/dev/shm,ipc",
        ]
        return Launch(argv, workdir, env=env, network=network, agent_protected=True, nproc_rlimit=False)
