#!/usr/bin/env bash
# The nemo-gym protocol driven by NeMo Gym's own client code (its rollout collection, environment
# servers, simple agent, gymnasium agent and vllm_model server from the `nemo-gym` package), version
# 0.7 or later. It lives in a venv of its own, <repo>/.venv-nemo-gym (override: NEMO_GYM_VENV=...),
# built here idempotently from pyenv's Python 3.13 (or PYTHON313=...): the project, editable, with its
# `nemo-gym` extra, plus pytest.
#
# Why --ignore-requires-python: nemo-gym 0.7 declares Requires-Python >= 3.13.14, and no such
# interpreter is available here (pyenv has 3.13.0); 0.7 installs, imports and passes these tests on
# 3.13.0, so pip is told to ignore the declaration instead of falling back to an older nemo-gym.
#
# A venv whose nemo_gym (>= 0.7) already imports is reused; one on another Python minor is rebuilt.
# A missing interpreter, a nemo-gym that stops installing or importing, or one older than 0.7 fails
# this script (and the tests run with CASCADE_REQUIRE_NEMO_GYM=1): it never skips.
#
# Runs tests/integrations/test_nemo_gym_real.py with the venv's python, then
# test_nemo_gym_real_resources.py with the project's .venv (NeMo Gym's servers started from this venv).
#
#   bash .ci/nemo_gym.sh [extra pytest args]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${NEMO_GYM_VENV:-$ROOT/.venv-nemo-gym}"
PY="$VENV/bin/python"
MIN_GYM="0.7"
TEST_DEPS=(pytest pytest-timeout)

log() { printf '[nemo_gym.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }
pip_install() {
    "$PY" -m pip install --quiet --ignore-requires-python "$@" 2>&1 \
        | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
# nemo_gym and the agents the tests start import, and the installed nemo-gym is >= $MIN_GYM.
gym_ready() {
    "$PY" - "$MIN_GYM" >/dev/null 2>&1 <<'EOF'
import sys
from importlib.metadata import version

import nemo_gym.rollout_collection, responses_api_agents.simple_agent.app  # noqa: F401
import environment_servers.legacy_agent.app  # noqa: F401

have = tuple(int(p) for p in version("nemo-gym").split(".")[:2])
sys.exit(0 if have >= tuple(int(p) for p in sys.argv[1].split(".")) else 1)
EOF
}
t0=$SECONDS

BASE="${PYTHON313:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python 2>/dev/null | sort -V | tail -1)}"
[[ -n "$BASE" && -x "$BASE" ]] || { echo "nemo_gym.sh: no Python 3.13 found (set PYTHON313=/path/to/python3.13)" >&2; exit 1; }
want_minor=$("$BASE" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ -x "$PY" && "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$want_minor" ]]; then
    log "rebuilding $VENV: it is not on Python $want_minor"
    rm -rf "$VENV"
fi
if [[ ! -x "$PY" ]]; then
    log "creating $VENV from $BASE"
    "$BASE" -m venv "$VENV"
fi

if gym_ready; then
    log "reusing $VENV"
    pip_install -e "$ROOT" --no-deps
else
    log "installing the project with its nemo-gym extra (nemo-gym>=$MIN_GYM)"
    pip_install -e "$ROOT[nemo-gym]" "nemo-gym>=$MIN_GYM"
fi
gym_ready || {
    echo "nemo_gym.sh: nemo-gym>=$MIN_GYM does not import after installing cascade-envs[nemo-gym]:" >&2
    "$PY" -c "import nemo_gym.rollout_collection" >&2 || true
    exit 1
}
pip_install "${TEST_DEPS[@]}"
log "venv ready in $((SECONDS - t0)) s: $("$PY" -V) nemo-gym $("$PY" -c 'from importlib.metadata import version; print(version("nemo-gym"))')"

cd "$ROOT"
tests=(tests/integrations/test_nemo_gym_real.py)
t1=$SECONDS
set +e
CASCADE_REQUIRE_NEMO_GYM=1 HF_HUB_OFFLINE=1 "$PY" -m pytest "${tests[@]}" -q -p no:cacheprovider "$@"
rc=$?
# NeMo Gym's own resources servers played as our env and trained on by our trainer: the servers run
# under this venv's Python, the trainer under the project's .venv (torch is installed for 3.11 only here).
[[ -x "$ROOT/.venv/bin/python" ]] || { echo "nemo_gym.sh: $ROOT/.venv is missing (run the README's test command first)" >&2; exit 1; }
CASCADE_REQUIRE_NEMO_GYM=1 NEMO_GYM_PYTHON="$PY" HF_HUB_OFFLINE=1 "$ROOT/.venv/bin/python" -m pytest \
    tests/integrations/test_nemo_gym_real_resources.py -q -p no:cacheprovider -n 0 "$@" || rc=1
set -e
log "NeMo Gym tests (${tests[*]}) finished in $((SECONDS - t1)) s (exit $rc)"
exit $rc
