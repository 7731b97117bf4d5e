#!/usr/bin/env bash
# The docs site: `mkdocs build --strict` of mkdocs.yml, from the repo root into build/site (its site_dir),
# the API reference included (mkdocstrings reads the source statically; the hook .ci/docs_hooks.py first
# copies the import package's layout to build/docs-src). Strict: any warning fails the build, among them
# a link or #anchor that does not resolve, a page left out of the nav, a --8<-- include that does not
# exist, and an object a ::: block names that griffe cannot find. The pages' code (python blocks run, CLI
# lines parsed, YAML loaded by the trainer) is tested by tests/test_docs.py in the main test run, not here.
#
# mkdocs and its plugins live in a venv of their own, <repo>/.venv-docs (override: DOCS_VENV=...), built
# here idempotently with python3.11: a venv where mkdocs, mkdocs-material and mkdocstrings' Python
# handler already import is reused. It never skips: packages that cannot be installed and a build with
# any warning fail this script (non-zero, with a last line naming the cause).
#
#   bash .ci/docs.sh [extra mkdocs build args]      DOCS_CONFIG=... builds another config file
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DOCS_VENV:-$ROOT/.venv-docs}"
CONFIG="${DOCS_CONFIG:-mkdocs.yml}"     # relative to the repo root
PY="$VENV/bin/python"
# Minimum versions: mkdocs 1.6 (validation: settings), material 9.5, mkdocstrings 0.26 (handler paths);
# ruff formats the signatures of the API reference.
SPECS=("mkdocs>=1.6" "mkdocs-material>=9.5" "mkdocstrings[python]>=0.26" "ruff")

log() { printf '[docs.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }
fail() { echo "docs.sh: FAILED: $*" >&2; exit 1; }
# pip, minus the warnings about this machine's absent local index folders.
pip_install() {
    "$PY" -m pip install --quiet "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
imports() { "$PY" -c "import mkdocs, material, mkdocstrings, mkdocstrings_handlers.python, ruff" >/dev/null 2>&1; }
t0=$SECONDS

if [[ ! -x "$PY" ]]; then
    log "creating $VENV"
    python3.11 -m venv "$VENV" || fail "python3.11 -m venv $VENV did not work (is python3.11 installed?)"
fi
if imports; then
    log "reusing $VENV ($("$VENV/bin/mkdocs" --version 2>/dev/null | cut -d' ' -f1-3))"
else
    log "installing ${SPECS[*]}"
    pip_install "${SPECS[@]}" || fail "pip could not install ${SPECS[*]} into $VENV (see pip's error above)"
    imports || fail "mkdocs, mkdocs-material or mkdocstrings[python] installed but does not import in $VENV"
fi
log "venv ready in $((SECONDS - t0)) s"

cd "$ROOT"
# The reference's ::: blocks need the import layout the hook makes: without the hook they fail later, and
# less clearly ("cascade_envs.trainer could not be found").
[[ -f "$CONFIG" ]] || fail "no $CONFIG in $ROOT"
grep -Eq '^hooks:' "$CONFIG" && grep -q 'docs_hooks.py' "$CONFIG" ||
    fail "$CONFIG has no 'hooks: [.ci/docs_hooks.py]': the API reference would read a stale or missing build/docs-src"
t1=$SECONDS
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
set +e
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --clean -f "$CONFIG" "$@" >"$out" 2>&1
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
    grep -v '^INFO' "$out" >&2 || true
    cause=$(grep -m1 -E '^(WARNING|ERROR)|Error:|Aborted' "$out" || tail -1 "$out")
    fail "mkdocs build --strict (exit $rc): $(echo "$cause" | tr -s ' ')"
fi
log "site built in $((SECONDS - t1)) s: $(grep -o 'Documentation built in .*' "$out" || echo 'build/site')"
