#!/usr/bin/env bash
# The nemo-gym protocol driven by NeMo Gym's own client code (its rollout collection, simple agent,
# gymnasium agent and vllm_model server from the `nemo-gym` package). nemo-gym needs Python >= 3.12
# (0.5+ needs 3.13.14), so it lives in a venv of its own, <repo>/.venv-nemo-gym (override:
# NEMO_GYM_VENV=...), built here idempotently from pyenv's 3.12 (or PYTHON312=...): the project,
# editable, with its `nemo-gym` extra, plus pytest. A venv whose nemo_gym already imports is reused.
# A missing package or interpreter fails this script (CASCADE_REQUIRE_NEMO_GYM=1): it never skips.
#
#   bash .ci/nemo_gym.sh [extra pytest args]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${NEMO_GYM_VENV:-$ROOT/.venv-nemo-gym}"
PY="$VENV/bin/python"
TEST_DEPS=(pytest pytest-timeout)

log() { printf '[nemo_gym.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }
pip_install() {
    "$PY" -m pip install --quiet "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
gym_imports() { "$PY" -c "import nemo_gym, responses_api_agents.simple_agent.app" >/dev/null 2>&1; }
t0=$SECONDS

if [[ ! -x "$PY" ]]; then
    BASE="${PYTHON312:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python 2>/dev/null | sort -V | tail -1)}"
    [[ -n "$BASE" && -x "$BASE" ]] || { echo "nemo_gym.sh: no Python 3.12 found (set PYTHON312=/path/to/python3.12)" >&2; exit 1; }
    log "creating $VENV from $BASE"
    "$BASE" -m venv "$VENV"
fi

if gym_imports; then
    log "reusing $VENV"
    pip_install -e "$ROOT" --no-deps
else
    log "installing the project with its nemo-gym extra"
    pip_install -e "$ROOT[nemo-gym]"
fi
gym_imports || { echo "nemo_gym.sh: nemo_gym does not import after installing cascade-envs[nemo-gym]" >&2; exit 1; }
pip_install "${TEST_DEPS[@]}"
log "venv ready in $((SECONDS - t0)) s: $("$PY" -V) nemo-gym $("$PY" -m pip show nemo-gym 2>/dev/null | awk '/^Version/{print $2}')"

t1=$SECONDS
cd "$ROOT"
set +e
CASCADE_REQUIRE_NEMO_GYM=1 HF_HUB_OFFLINE=1 "$PY" -m pytest tests/integrations/test_nemo_gym_real.py -q -p no:cacheprovider "$@"
rc=$?
set -e
log "NeMo Gym tests finished in $((SECONDS - t1)) s (exit $rc)"
exit $rc
