"""NeMo Gym's own servers, in process, around a cascade env served with ``--protocol nemo-gym``.

``GymStack(resources_url, chat_url)`` runs, from the ``nemo-gym`` package: its head server (which
hands the global config to clients), its ``vllm_model`` Responses-API model server (Responses <->
Chat Completions, here against a local chat-completions server), its ``simple_agent`` and its
``gymnasium_agent``, all pointing at our resources server. ``collect(rows)`` runs NeMo Gym's rollout
collection (``RolloutCollectionHelper.run_examples``: ``POST /run`` on each row's ``agent_ref``).
The agents and the model server share one event loop on a thread of their own (NeMo Gym's global
aiohttp client is bound to one loop; its ``run_webserver`` would also start Ray, which a test does not need).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import requests
import uvicorn

from cascade_envs.serving.server import BackgroundServer
from tests.chat_server import ScriptedChatServer

HOST = "127.0.0.1"
SIMPLE_AGENT = "cascade_simple_agent"
GYM_AGENT = "cascade_gym_agent"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def global_config(resources_url: str, chat_url: str, ports: dict[str, int]) -> dict[str, Any]:
    resources = urlparse(resources_url)
    refs = {
        "resources_server": {"type": "resources_servers", "name": "cascade_resources"},
        "model_server": {"type": "responses_api_models", "name": "policy_model"},
    }
    return {
        "head_server": {"host": HOST, "port": ports["head"]},
        "policy_model": {
            "responses_api_models": {
                "vllm_model": {
                    "entrypoint": "app.py",
                    "host": HOST,
                    "port": ports["model"],
                    "base_url": chat_url,
                    "api_key": "none",
                    "model": "echo-answer",
                    "return_token_id_information": False,
                    "uses_reasoning_parser": False,
                }
            }
        },
        "cascade_resources": {
            "resources_servers": {
                "cascade": {
                    "entrypoint": "cascade-envs serve",
                    "host": resources.hostname,
                    "port": resources.port,
                }
            }
        },
        SIMPLE_AGENT: {
            "responses_api_agents": {
                "simple_agent": {"entrypoint": "app.py", "host": HOST, "port": ports["simple"], **refs}
            }
        },
        GYM_AGENT: {
            "responses_api_agents": {
                "gymnasium_agent": {
                    "entrypoint": "app.py",
                    "host": HOST,
                    "port": ports["gym"],
                    "max_steps": 30,
                    **refs,
                }
            }
        },
    }


class GymStack:
    def __init__(self, resources_url: str, chat_url: str):
        ports = {name: free_port() for name in ("head", "model", "simple", "gym")}
        self.config = global_config(resources_url, chat_url, ports)
        os.environ["NEMO_GYM_CONFIG_DICT"] = json.dumps(self.config)

        from nemo_gym import global_config as gym_config
        from nemo_gym.config_types import BaseServerConfig
        from nemo_gym.server_utils import HeadServer, ServerClient
        from responses_api_agents.gymnasium_agent.app import GymnasiumAgent, GymnasiumAgentConfig
        from responses_api_agents.simple_agent.app import SimpleAgent, SimpleAgentConfig
        from responses_api_models.vllm_model.app import VLLMModel, VLLMModelConfig

        gym_config._GLOBAL_CONFIG_DICT = None  # read once per process: a second stack brings new ports
        global_dict = gym_config.get_global_config_dict()
        self.head_config = BaseServerConfig(host=HOST, port=ports["head"])
        self._head_server, self._head_thread, _ = HeadServer.run_webserver()
        client = ServerClient(head_server_config=self.head_config, global_config_dict=global_dict)

        def section(name: str) -> dict[str, Any]:
            instance = next(iter(self.config[name].values()))  # {server type: {implementation: config}}
            return {**next(iter(instance.values())), "name": name}

        model = VLLMModel(config=VLLMModelConfig(**section("policy_model")), server_client=client)
        simple = SimpleAgent(config=SimpleAgentConfig(**section(SIMPLE_AGENT)), server_client=client)
        gym = GymnasiumAgent(config=GymnasiumAgentConfig(**section(GYM_AGENT)), server_client=client)
        self._servers = [
            uvicorn.Server(uvicorn.Config(s.setup_webserver(), host=HOST, port=ports[p], log_level="warning"))
            for s, p in ((model, "model"), (simple, "simple"), (gym, "gym"))
        ]
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        for server in self._servers:
            asyncio.run_coroutine_threadsafe(server.serve(), self.loop)
        deadline = time.monotonic() + 60
        for port in (ports["head"], ports["model"], ports["simple"], ports["gym"]):
            while True:
                try:
                    requests.get(f"http://{HOST}:{port}/", timeout=2)
                    break
                except requests.ConnectionError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"NeMo Gym server on port {port} did not start") from None
                    time.sleep(0.1)

    def collect(
        self, rows: list[dict[str, Any]], timeout: float = 300
    ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """NeMo Gym's rollout collection over ``rows``: ``(row, /run result)`` pairs, as completed."""
        from nemo_gym.rollout_collection import RolloutCollectionHelper

        async def run() -> list[tuple[dict[str, Any], dict[str, Any]]]:
            futures = RolloutCollectionHelper().run_examples(rows, self.head_config)
            return [await f for f in futures]

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def close(self) -> None:
        from nemo_gym import server_utils

        for server in self._servers:
            server.should_exit = True
        self._head_server.should_exit = True
        time.sleep(0.3)
        client = server_utils._GLOBAL_AIOHTTP_CLIENT  # bound to our loop: close it there, not at exit
        if client is not None:
            asyncio.run_coroutine_threadsafe(client.close(), self.loop).result(10)
            server_utils._GLOBAL_AIOHTTP_CLIENT = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@contextlib.contextmanager
def gym_stack(policy: Any, env: Any, **serve_options: Any) -> Iterator[tuple[GymStack, BackgroundServer]]:
    """``(stack, served)``: ``env`` served with ``--protocol nemo-gym`` (``BackgroundServer``), a local
    chat-completions server answering with ``policy``, and NeMo Gym's stack between them; all closed on exit."""
    with (
        ScriptedChatServer(policy) as chat,
        BackgroundServer("nemo-gym", env, **serve_options) as served,
    ):
        stack = GymStack(served.url, chat.url + "/v1")
        try:
            yield stack, served
        finally:
            stack.close()
