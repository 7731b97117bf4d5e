#!/usr/bin/env bash
# Lays out the `cascade_envs` import package under DEST (DEST/cascade_envs) as a tree of symlinks into this
# checkout: setup.py's PACKAGE_DIRS maps the top-level folders envs/, plugins/ and trainer/ onto
# cascade_envs.envs/.plugins/.trainer, so the source tree does not have the package's shape. cascade_envs/
# is copied as symlinks (`cp -as`) and each mapped folder linked in; PACKAGE_DIRS is read from setup.py
# (statically, .ci/package_dirs.py) so a new mapping needs no edit here. Used by .ci/typecheck and
# .ci/gpu.sh; the docs hook (.ci/docs_hooks.py) copies files instead, as griffe resolves symlinks back
# to the source tree.
#
#   bash .ci/import_layout.sh DEST
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:?usage: bash .ci/import_layout.sh DEST}"
PY="$(command -v python3 || command -v python)"

cp -as "$ROOT/cascade_envs" "$DEST/cascade_envs"
"$PY" "$ROOT/.ci/package_dirs.py" | while read -r package folder; do ln -s "$ROOT/$folder" "$DEST/${package//.//}"; done
