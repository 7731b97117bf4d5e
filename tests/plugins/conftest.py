"""Make the example plugin's source importable for its unit tests (no install needed for those)."""

from __future__ import annotations

import sys
from pathlib import Path

PLUGIN_DIR = Path(__file__).resolve().parents[2] / "examples" / "cascade-envs-example-plugin"

if str(PLUGIN_DIR) not in sys.path:
    sys.path.insert(0, str(PLUGIN_DIR))
