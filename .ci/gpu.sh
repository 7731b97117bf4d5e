#!/usr/bin/env bash
# The offline GPU check (not part of .ci/run): bench/gpu_check.py on a one-GPU machine with no network,
# with the machine's own python3, torch and transformers (never installed here). It prints the
# environment, then this trainer vs TRL's GRPOTrainer at two model sizes and one FSDP2 rank on NCCL in
# one table, in at most ~6 minutes; gpu_check.md/.json/.log go to $OUT when set (the device machine's
# result folder), else build/gpu_check.
#
# What the machine lacks travels in .whl/ (git-ignored; fill it here with `bash .ci/gpu_wheels.sh`,
# which needs PyPI): the wheels go into a temporary --target folder on PYTHONPATH, and SmolLM2's
# tokenizer is read from .whl/smollm2-tokenizer. This project is imported from the working tree (its
# import layout built with symlinks by .ci/import_layout.sh), so the check runs the code that travelled.
# Without nvidia-smi it refuses with one line (exit 2).
#
#   bash .ci/gpu.sh [--cpu-smoke] [extra bench/gpu_check.py args]
#
# --cpu-smoke: the same stages on CPU with two tiny models and this checkout's installed package
# (PYTHON, default .venv/bin/python); CI runs it (tests/bench/test_gpu_check.py).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="${OUT:-$ROOT/build/gpu_check}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
mkdir -p "$OUT_DIR"

if [[ "${1:-}" == "--cpu-smoke" ]]; then
    shift
    exec timeout 300 "${PYTHON:-$ROOT/.venv/bin/python}" "$ROOT/bench/gpu_check.py" --cpu-smoke --out "$OUT_DIR" "$@"
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu.sh: refused: nvidia-smi not found; this check needs a machine with an NVIDIA GPU (nothing was run)" >&2
    exit 2
fi
PY="${PYTHON:-python3}"
log() { printf '[gpu.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }
log "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1); $("$PY" --version 2>&1)"

SITE="$(mktemp -d /tmp/cascade-gpu-site.XXXXXX)"
if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$ROOT"/.whl/*.whl \
        && log "installed $(ls "$ROOT"/.whl/*.whl | wc -l) carried wheels into $SITE" \
        || log "installing the carried wheels failed; the stages that need them will say so"
else
    log "no .whl/*.whl (run bash .ci/gpu_wheels.sh where PyPI is reachable): TRL's side will fail"
fi
bash "$ROOT/.ci/import_layout.sh" "$SITE"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

start=$SECONDS
cd "$SITE"  # not the checkout: a rank started with `python -m` puts its cwd first on sys.path
timeout 350 "$PY" "$ROOT/bench/gpu_check.py" --out "$OUT_DIR" "$@"
rc=$?
log "bench/gpu_check.py finished in $((SECONDS - start)) s (exit $rc); table: $OUT_DIR/gpu_check.md"
exit "$rc"
