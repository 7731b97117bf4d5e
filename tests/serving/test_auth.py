"""Who may connect: one rule for serve, serve-sandbox and serve-judge; 401 without the right token."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from cascade_envs.cli import main
from cascade_envs.core import CascadeError
from cascade_envs.envs.code.env import CodeEnv
from cascade_envs.judges.server import ChatService
from cascade_envs.judges.server import start_server as start_judge
from cascade_envs.serving.auth import TOKEN_ENV, check_access, is_loopback
from cascade_envs.testing import ScriptedPolicy

TOKEN = "s3cret-token-of-the-test"


def test_the_rule(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback(host) and check_access(host) is None
    for host in ("0.0.0.0", "::", "10.1.2.3", "env.example.com"):
        assert not is_loopback(host)
        with pytest.raises(CascadeError, match=r"--token TOKEN .* or --allow-remote"):
            check_access(host)
        assert check_access(host, allow_remote=True) is None
        assert check_access(host, TOKEN) == TOKEN
    assert check_access("127.0.0.1", TOKEN) == TOKEN  # a token given on loopback is required there too
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert check_access("0.0.0.0") == TOKEN  # the environment variable counts as --token
    with pytest.raises(CascadeError, match="empty"):
        check_access("0.0.0.0", "  ")


@pytest.mark.parametrize(
    "argv",
    [
        ["serve-sandbox", "--host", "0.0.0.0"],
        ["serve-judge", "--host", "0.0.0.0"],
        ["serve", "--protocol", "nemo-gym", "--host", "0.0.0.0", "cascade/MCQA-v0"],
    ],
)
def test_every_server_refuses_a_remote_host_without_auth_in_one_line(argv, capsys, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert main(argv) == 2  # refused before anything is loaded or bound
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and "refusing to serve" in err and "--token" in err and "--allow-remote" in err
    )


def statuses(url: str, path: str, method: str = "GET", body: bytes = b"{}") -> list[int]:
    """The status without a token, with a wrong one, with the right one, and a wrong scheme."""
    out = []
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN}"},
        {"Authorization": f"Basic {TOKEN}"},
    ):
        out.append(httpx.request(method, url + path, headers=headers, content=body, timeout=30).status_code)
    return out


def test_sandbox_service_requires_its_token(monkeypatch):
    from cascade_envs.envs.code.service import BackgroundService

    with BackgroundService(workers=1, token=TOKEN) as service:
        assert statuses(service.url, "/health") == [401, 401, 200, 401]
        # a huge body without the token is refused before it is read
        big = httpx.post(service.url + "/verify", content=b"x" * (20 << 20), timeout=30)
        assert big.status_code == 401
        task = {
            "prompt": "add",
            "verifier_metadata": {"unit_tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}},
        }
        good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
        monkeypatch.setenv(TOKEN_ENV, TOKEN)  # the env's client sends $CASCADE_ENVS_TOKEN
        env = CodeEnv(tasks=[task], verifier_url=service.url, time_limit_s=2)
        assert asyncio.run(env.areward(task, good)).value == 1.0
        env.close()
        monkeypatch.setenv(TOKEN_ENV, "wrong")
        env = CodeEnv(tasks=[task], verifier_url=service.url, time_limit_s=2)
        assert asyncio.run(env.areward(task, good)).masked  # refused: masked, never a silent 0
        env.close()


def test_judge_requires_its_token(monkeypatch):
    async def scenario() -> list[int]:
        service = ChatService(ScriptedPolicy(lambda messages: "ok"), "m")
        server = await start_judge(service, "127.0.0.1", 0, token=TOKEN)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        body = b'{"messages": [{"role": "user", "content": "hi"}]}'
        try:
            return await asyncio.to_thread(statuses, url, "/v1/chat/completions", "POST", body)
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(scenario()) == [401, 401, 200, 401]
