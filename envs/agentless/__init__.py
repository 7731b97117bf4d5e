"""Agentless issue repair (``cascade/AgentlessRepair-v0``): SEARCH/REPLACE edits scored by an LLM judge
or by SWE-RL patch similarity; also loads NeMo Gym ``swerl_gen`` and ``swerl_llm_judge`` rows."""
