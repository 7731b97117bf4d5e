"""cascade envs inside verl (``pip install 'cascade-envs[verl]'``).

- ``agent_loop.CascadeAgentLoop``: verl's agent loop ``"cascade"``, which plays any cascade env over
  verl's server client token in, token out (no re-tokenisation of the history) and returns an
  ``AgentLoopOutput`` whose ``response_mask`` is our loss mask;
- ``manager.CascadeAgentLoopManager``: scores group-scored envs (GenRM) once all G rollouts of a
  prompt are back (``rollout.agent.agent_loop_manager_class``);
- ``scoring.compute_score``: verl's ``custom_reward_function`` for single-turn envs, per sample and
  over a batch (G responses of a prompt scored together);
- ``advantage``: the ``cascade_grpo`` advantage estimator: verl's GRPO with masked samples left out of
  their group's statistics;
- ``export.export_verl``: an env's rows as verl parquet (``cascade-envs export --format verl``).

Masked rewards: verl has no slot for them. A masked sample gets an all-zero ``response_mask`` (agent
loop) or a NaN score (``compute_score``); ``cascade_grpo`` treats both as masked: its own group of
one, advantage 0, out of the others' mean and std. The agent loop refuses to run under another
group-baseline estimator, whose baseline would count the sample as a 0.

verl imports this package at start-up through its ``verl.plugins`` entry point (``plugin``), which
registers the agent loop and the estimator in every verl process. This module imports nothing of verl.
"""
