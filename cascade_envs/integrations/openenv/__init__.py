"""OpenEnv (``openenv-core``): serve any cascade env as an OpenEnv server, and a typed client for it.

- ``cascade-envs serve --protocol openenv ENV_ID`` (``server``): reset/step/state over the
  WebSocket ``/ws`` (``EnvClient``'s transport), ``/schema`` and the rest over HTTP;
- ``client.CascadeEnvClient``: an ``openenv.core.EnvClient`` with typed actions and observations
  (OpenEnv's ``GenericEnvClient`` works too, with dicts).

``pip install 'cascade-envs[openenv]'``; nothing here is imported by ``import cascade_envs``.
"""
