# Every target builds (or reuses) the cached environment first: see scripts/venv.sh.
# TORCH=2.14 (any supported series: requirements/torch-*.txt) runs a target in that torch's environment.
empty :=
TORCH_SERIES := $(subst $(empty) $(empty),.,$(wordlist 1,2,$(subst ., ,$(TORCH))))
VENV := $(if $(TORCH),.venv-torch-$(TORCH_SERIES),.venv)
PY := $(VENV)/bin/python
export TORCH

.PHONY: venv test upstream-test bench fuzz demo status gpu

venv:
	./scripts/venv.sh

# On every core (pytest-xdist): one test module per unit of work, so that a module's shared launch (the
# DTensor programs' torchrun) runs once; conftest.py hands out the longest modules first.
test: venv
	$(PY) -m pytest --numprocesses auto --dist loadscope --no-loadscope-reorder

# lightning-thunder's own test suite with the patch set off, on, and on with symbolic values as the default cache
# option, compared test by test (scripts/upstream_tests.toml lists what is expected). SUBSET=ci: the part CI runs.
SUBSET ?= all
MODES ?= off,on,symbolic
upstream-test: venv
	$(PY) scripts/upstream_tests.py --subset $(SUBSET) --modes $(MODES)

# The main job: tensor-parallel inference on CPU over 2 ranks, constant vs symbolic values.
bench: venv
	OMP_NUM_THREADS=1 $(VENV)/bin/torchrun --nproc-per-node 2 thunder/benchmarks/benchmark_inference.py \
		--mode thunder --compare-cache --save-results --output-dir results

# The long fuzzing profile (random programs; THUNDER_SYMBOLIC_FUZZ_EXAMPLES, default 2000).
fuzz: venv
	THUNDER_SYMBOLIC_FUZZ=long $(PY) -m pytest -s -p no:warnings thunder/tests/test_fuzz_dynamic_shapes.py

demo: venv
	$(PY) examples/decode_demo.py

status: venv
	$(PY) -m thunder_symbolic

# Every check that needs a CUDA GPU (nvFuser fusions, CUDA test variants, a single-GPU benchmark run).
gpu: venv
	PYTHON=$(PY) ./scripts/gpu_checks.sh
