"""``cascade/SWE-v0``: execution-based SWE RL through OpenHands' tools in a sandbox workspace (``env.py``)."""
