#!/usr/bin/env bash
# Every check that needs a CUDA GPU, in one go: the CUDA variants of the tests (nvFuser fusions under
# symbolic values, the decoder and DTensor programs on CUDA) and a short single-GPU run of the inference
# benchmark (eager, inductor and thunder). Figures and JUnit results go to ${OUT:-gpu-results}.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"

"$PY" - <<'PYEOF'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu_checks.sh: no CUDA device is visible; these checks need one")
print(f"CUDA device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
PYEOF
"$PY" -m thunder_symbolic

status=0
"$PY" -m pytest -q -rs -k cuda --junitxml="$OUT/gpu-tests.xml" \
    thunder/tests/test_nvfuser_symbolic.py thunder/tests/test_decoder_symbolic.py \
    thunder/tests/test_dtensor_symbolic.py thunder/tests/test_benchmark_training.py || status=$?

# Symbolic values against eager and inductor (issue 20's table on CUDA). Constant values is left out: it compiles
# at every decode step (about 3 s a token on an H200), minutes that a lent GPU's time cannot spare.
"$PY" thunder/benchmarks/benchmark_inference.py --device cuda --model-name tiny-llama4 \
    --compare-modes eager,inductor,thunder --thunder-cache "symbolic values" \
    --input-length 256 --output-length 32 --num-iterations 3 --warmup-iterations 1 \
    --save-results --output-dir "$OUT" || status=$?

exit "$status"
