# Every target builds (or reuses) the cached environment first: see scripts/venv.sh.
PY := .venv/bin/python

.PHONY: venv test bench demo status

venv:
	./scripts/venv.sh

test: venv
	$(PY) -m pytest

# The main job: tensor-parallel inference on CPU over 2 ranks, constant vs symbolic values.
bench: venv
	OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc-per-node 2 thunder/benchmarks/benchmark_inference.py \
		--mode thunder --compare-cache --save-results --output-dir results

demo: venv
	$(PY) examples/decode_demo.py

status: venv
	$(PY) -m thunder_symbolic
