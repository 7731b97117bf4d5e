"""``python -m cascade_envs.cli``: the ``cascade-envs`` command (torchrun starts training ranks so)."""

import sys

from . import main

sys.exit(main())
