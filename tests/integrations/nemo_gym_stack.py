"""NeMo Gym 0.7's own servers, in process, around resources servers at URLs (ours, served with
``--protocol nemo-gym``, or NeMo Gym's own).

``GymStack({name: resources_url}, chat_url)`` runs, from the ``nemo-gym`` package: its head server
(which hands the global config to clients), its ``vllm_model`` Responses-API model server (Responses
<-> Chat Completions, here against a local chat-completions server), and, on each resources server,
three agents, each behind the environment server rollout collection reaches it through (0.7
dispatches every row to one); ``agent_name(name, kind)`` names them (for ``cascade``: the constants):

- ``simple`` (``SIMPLE_AGENT``): ``simple_agent`` behind ``single_agent_turn_legacy``, which seeds the
  resources server with a typed seed, grants the agent direct HTTP access to its tools, verifies and
  closes;
- ``relay`` (``RELAY_AGENT``): ``simple_agent`` behind ``legacy_agent``, the relay NeMo Gym's own
  configs put in front of agents that run the whole rollout in ``/run`` (seed, tools, ``/verify``);
- ``gym`` (``GYM_AGENT``): ``gymnasium_agent`` (``/reset``, ``/step``, ``/close``) behind ``legacy_agent``.

Rows name their agent by ``task_source``. ``collect(rows)`` runs NeMo Gym's rollout collection as a
trainer does: ``RolloutCollectionHelper.preprocess_examples`` (task and rollout indexes, repeats),
then ``run_examples`` (``POST /run`` on the row's environment server). The servers share one event
loop on a thread of their own (NeMo Gym's global aiohttp client is bound to one loop; its
``run_webserver`` would also start Ray, which a test does not need).
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
KINDS = {  # agent kind -> (agent implementation, the environment server in front of it)
    "simple": ("simple_agent", "single_agent_turn_legacy"),
    "relay": ("simple_agent", "legacy_agent"),
    "gym": ("gymnasium_agent", "legacy_agent"),
}
LIMITS = {"default_episode_timeout_seconds": 600, "cleanup_timeout_seconds": 60}


def agent_name(resources: str, kind: str) -> str:
    """The agent instance of ``kind`` on resources server ``resources`` (its rows' ``task_source``)."""
    return f"{resources}_{kind}_agent"


def environment_name(agent: str) -> str:
    """The environment server instance in front of ``agent``."""
    return agent.removesuffix("_agent") + "_env"


SIMPLE_AGENT, RELAY_AGENT, GYM_AGENT = (agent_name("cascade", kind) for kind in KINDS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _server(kind: str, implementation: str, port: int, **config: Any) -> dict[str, Any]:
    return {kind: {implementation: {"entrypoint": "app.py", "host": HOST, "port": port, **config}}}


def global_config(resources: dict[str, str], chat_url: str, ports: dict[str, int]) -> dict[str, Any]:
    """The NeMo Gym config of the stack: ``resources`` by name -> URL, ``ports`` by instance name."""
    config: dict[str, Any] = {
        "head_server": {"host": HOST, "port": ports["head"]},
        "policy_model": _server(
            "responses_api_models",
            "vllm_model",
            ports["policy_model"],
            base_url=chat_url,
            api_key="none",
            model="echo-answer",
            return_token_id_information=False,
            uses_reasoning_parser=False,
        ),
    }
    for name, url in resources.items():
        where = urlparse(url)
        config[f"{name}_resources"] = {
            "resources_servers": {name: {"host": where.hostname, "port": where.port}}
        }
        refs = {
            "resources_server": {"type": "resources_servers", "name": f"{name}_resources"},
            "model_server": {"type": "responses_api_models", "name": "policy_model"},
        }
        for kind, (implementation, front) in KINDS.items():
            agent = agent_name(name, kind)
            steps = {"max_steps": 30} if kind == "gym" else {}
            config[agent] = _server("responses_api_agents", implementation, ports[agent], **refs, **steps)
            binding: dict[str, Any] = {"agent_server": {"type": "responses_api_agents", "name": agent}}
            if front == "single_agent_turn_legacy":  # owns the episode: seeds, grants tools, closes
                binding |= {
                    "resources_server": refs["resources_server"],
                    "resources_tool_transports": ["direct_http"],
                }
                binding |= LIMITS
            config[environment_name(agent)] = _server(
                "environment_servers", front, ports[environment_name(agent)], **binding
            )
    return config


class GymStack:
    def __init__(self, resources: dict[str, str], chat_url: str):
        agents = [agent_name(name, kind) for name in resources for kind in KINDS]
        names = ["head", "policy_model", *agents, *map(environment_name, agents)]
        ports = {name: free_port() for name in names}
        self.config = global_config(resources, chat_url, ports)
        os.environ["NEMO_GYM_CONFIG_DICT"] = json.dumps(self.config)

        from environment_servers.legacy_agent.app import (
            LegacyAgentEnvironmentServer,
            LegacyAgentEnvironmentServerConfig,
        )
        from environment_servers.single_agent_turn.app import SingleAgentTurnEnvironmentServerConfig
        from environment_servers.single_agent_turn_legacy.app import SingleAgentTurnLegacyEnvironmentServer
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

        def make(cls: Any, config_cls: Any, name: str) -> Any:
            instance = next(iter(self.config[name].values()))  # {server type: {implementation: config}}
            config = config_cls(**next(iter(instance.values())), name=name)
            return cls(config=config, server_client=client)

        classes = {
            "simple_agent": (SimpleAgent, SimpleAgentConfig),
            "gymnasium_agent": (GymnasiumAgent, GymnasiumAgentConfig),
            "single_agent_turn_legacy": (
                SingleAgentTurnLegacyEnvironmentServer,
                SingleAgentTurnEnvironmentServerConfig,
            ),
            "legacy_agent": (LegacyAgentEnvironmentServer, LegacyAgentEnvironmentServerConfig),
        }
        servers = {"policy_model": make(VLLMModel, VLLMModelConfig, "policy_model")}
        for name in (*agents, *map(environment_name, agents)):
            implementation = next(iter(next(iter(self.config[name].values()))))
            servers[name] = make(*classes[implementation], name)
        self._servers = [
            uvicorn.Server(uvicorn.Config(s.setup_webserver(), host=HOST, port=ports[n], log_level="warning"))
            for n, s in servers.items()
        ]
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        for server in self._servers:
            asyncio.run_coroutine_threadsafe(server.serve(), self.loop)
        deadline = time.monotonic() + 60
        for port in ports.values():
            while True:
                try:
                    requests.get(f"http://{HOST}:{port}/", timeout=2)
                    break
                except requests.ConnectionError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"NeMo Gym server on port {port} did not start") from None
                    time.sleep(0.1)

    def collect(
        self, rows: list[dict[str, Any]], num_repeats: int = 1, timeout: float = 300, **run_options: Any
    ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """NeMo Gym's rollout collection over ``rows`` (each ``num_repeats`` times): ``(row, /run
        result)`` pairs, as completed (``run_options``: ``run_examples``' keyword arguments)."""
        from nemo_gym.rollout_collection import RolloutCollectionHelper

        helper = RolloutCollectionHelper()
        examples = helper.preprocess_examples(rows, num_repeats=num_repeats)

        async def run() -> list[tuple[dict[str, Any], dict[str, Any]]]:
            return [await f for f in helper.run_examples(examples, self.head_config, **run_options)]

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def aggregate(self, agent: str, results: list[dict[str, Any]]) -> dict[str, Any]:
        """``/aggregate_metrics`` of ``results`` asked of ``agent``'s environment server, as collection does."""
        port = next(iter(next(iter(self.config[environment_name(agent)].values())).values()))["port"]
        answer = requests.post(
            f"http://{HOST}:{port}/aggregate_metrics", json={"verify_responses": results}, timeout=60
        )
        answer.raise_for_status()
        return dict(answer.json())

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
        stack = GymStack({"cascade": served.url}, chat.url + "/v1")
        try:
            yield stack, served
        finally:
            stack.close()
