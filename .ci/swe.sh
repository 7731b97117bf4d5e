#!/usr/bin/env bash
# The SWE env's tests with the OpenHands SDK, which needs Python >= 3.12: in a venv of its own,
# <repo>/.venv-swe (override: SWE_VENV=...), built here idempotently from pyenv's 3.12 (or
# PYTHON312=...): the project, editable, with its `swe` extra (openhands-sdk, openhands-tools,
# docker; no torch), plus pytest and Ray. A venv whose SDK already imports is reused. Runs tests/envs/swe
# (episodes end to end in bwrap and local workspaces and in docker containers, the grader's attack suite on
# bwrap and docker, SWE episodes on a Ray actor) and the sandbox's workspace tests; a missing SDK or
# interpreter fails this script, it never skips. It also downloads (pinned) the wheels and the Django sdist that
# the SWE image layouts are built from (tests/envs/swe/layouts.py, layout_rows.py: SWE-bench, SWE-Gym, SWE-smith, R2E-Gym rows
# in their own images). The docker tests need a daemon (.ci/run starts one; with
# CASCADE_ENVS_REQUIRE_DOCKER=1 they fail rather than skip without it). The pytest rows run on the
# sandbox's python3 (/usr/bin/python3): python3-pytest is installed from apt if missing.
#
#   bash .ci/swe.sh [extra pytest args]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SWE_VENV:-$ROOT/.venv-swe}"
PY="$VENV/bin/python"
TEST_DEPS=(pytest pytest-timeout pytest-xdist "ray>=2.40")  # ray: the SWE episodes on a Ray actor (docker)

log() { printf '[swe.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }
# pip, minus the warnings about this machine's absent local index folders.
pip_install() {
    "$PY" -m pip install --quiet "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
sdk_imports() { OPENHANDS_SUPPRESS_BANNER=1 LITELLM_LOCAL_MODEL_COST_MAP=True "$PY" -c "import openhands.tools.terminal.definition" >/dev/null 2>&1; }
t0=$SECONDS

if [[ ! -x "$PY" ]]; then
    BASE="${PYTHON312:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python 2>/dev/null | sort -V | tail -1)}"
    [[ -n "$BASE" && -x "$BASE" ]] || { echo "swe.sh: no Python 3.12 found (set PYTHON312=/path/to/python3.12)" >&2; exit 1; }
    log "creating $VENV from $BASE"
    "$BASE" -m venv "$VENV"
fi

if sdk_imports; then
    log "reusing $VENV"
    pip_install -e "$ROOT" --no-deps
else
    log "installing the project with its swe extra"
    pip_install -e "$ROOT[swe]"
fi
sdk_imports || { echo "swe.sh: the OpenHands SDK does not import after installing cascade-envs[swe]" \
                      "(does pyproject.toml's swe extra list openhands-sdk and openhands-tools?)" >&2; exit 1; }
pip_install "${TEST_DEPS[@]}"
versions=$("$PY" -m pip list 2>/dev/null | awk '/^openhands-(sdk|tools) /{printf "%s %s ", $1, $2}')
log "venv ready in $((SECONDS - t0)) s: $("$PY" -V) $versions"

# The wheels and sdists the offline SWE image layouts are built from (tests/envs/swe/layouts.py): pytest for the
# conda-path and R2E venvs, Django 4.2.16's sdist (its own source and tests) with asgiref and sqlparse, SymPy with
# mpmath. Downloaded here (install time); the tests never reach the network and fail without them.
WHEELS="$ROOT/build/swe-wheels"
mkdir -p "$WHEELS"
t2=$SECONDS
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 --platform any -d "$WHEELS" \
    pytest==8.3.5 pluggy==1.5.0 iniconfig==2.0.0 packaging==24.2 asgiref==3.8.1 sqlparse==0.5.1 \
    mpmath==1.3.0 sympy==1.13.3 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
"$PY" -m pip download --quiet --no-deps --no-binary=:all: -d "$WHEELS" django==4.2.16 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
[[ -f "$WHEELS/Django-4.2.16.tar.gz" || -f "$WHEELS/django-4.2.16.tar.gz" ]] \
    || { echo "swe.sh: the Django 4.2.16 sdist did not download into $WHEELS" >&2; exit 1; }
export CASCADE_SWE_WHEELS="$WHEELS"
log "layout wheels ready in $((SECONDS - t2)) s: $(ls "$WHEELS" | tr '\n' ' ')"

if ! /usr/bin/python3 -c "import pytest" >/dev/null 2>&1; then
    log "installing python3-pytest (the sandbox's python3 runs the pytest rows)"
    { apt-get update -qq && apt-get install -y -qq python3-pytest; } >/dev/null
fi

cd "$ROOT"
# The SWE image layouts (a Debian root by mmdebstrap the first time, then an image per layout, seconds each; kept
# by the daemon and rebuilt only when what they hold changes), built before the tests so their time shows here.
"$PY" -c "from tests.envs.swe.layout_rows import prepare; prepare()"

t1=$SECONDS
set +e
"$PY" -m pytest tests/envs/swe tests/sandbox/test_workspace.py -q -n 0 -p no:cacheprovider "$@"
rc=$?
set -e
log "SWE tests finished in $((SECONDS - t1)) s (exit $rc)"
exit $rc
