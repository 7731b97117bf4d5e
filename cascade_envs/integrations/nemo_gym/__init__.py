"""NeMo Gym / NeMo-RL: serve any cascade env as a NeMo Gym resources server, export rows as Gym JSONL,
and play any NeMo Gym resources server as a cascade env.

``cascade-envs serve --protocol nemo-gym ENV_ID`` (``server``) speaks the resources-server protocol
(``/seed_session``, one ``POST /<tool>`` per tool, ``/verify``, Gymnasium-style ``/reset`` and
``/step``, ``/aggregate_metrics``) with OpenAI Responses items in and out (``responses``), and scores
group-scored envs (GenRM) per prompt cohort under a deadline (``groups``). ``cascade-envs export
--format nemo-gym`` writes rows with ``responses_create_params`` (``export``). The other way round,
``nemo-gym/Resources-v0`` (``env``) plays a resources server's rows as an env of ours, over the
protocol's client side (``client``), starting the server itself when asked (``launch``). None of
this imports the ``nemo-gym`` package: both sides speak its wire format; the package is needed only
by NeMo Gym's own agents, rollout collection and servers, which the tests run against ours.
"""
