"""NeMo Gym / NeMo-RL: serve any cascade env as a NeMo Gym resources server, export rows as Gym JSONL.

``cascade-envs serve --protocol nemo-gym ENV_ID`` (``server``) speaks the resources-server protocol
(``/seed_session``, one ``POST /<tool>`` per tool, ``/verify``, Gymnasium-style ``/reset`` and
``/step``, ``/aggregate_metrics``) with OpenAI Responses items in and out (``responses``), and scores
group-scored envs (GenRM) per prompt cohort under a deadline (``groups``). ``cascade-envs export
--format nemo-gym`` writes rows with ``responses_create_params`` (``export``). None of this imports
the ``nemo-gym`` package: the server speaks its wire format; the package is needed only by the
client side (its agents and rollout collection), which the tests run against it.
"""
