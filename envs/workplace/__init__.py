"""Workplace tool use (``cascade/Workplace-v0``): 27 tools over a simulated workplace, scored by its final state.

``tables.py`` holds the state (a template per tables folder, a copy-on-write copy per episode),
one module per data set holds its tools (``email``, ``calendar``, ``analytics``,
``project_management``, ``crm``, ``directory``), ``compare.py`` the normalised state comparison,
``answer.py`` the answer check of question tasks, ``task.py`` the row layout (NeMo Gym's
``workplace_assistant``, read once per row) and ``env.py`` the env.
"""
