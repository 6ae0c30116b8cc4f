# Every target builds (or reuses) the cached environment first: see scripts/venv.sh.
PY := .venv/bin/python

.PHONY: venv test demo status

venv:
	./scripts/venv.sh

test: venv
	$(PY) -m pytest

demo: venv
	$(PY) examples/decode_demo.py

status: venv
	$(PY) -m thunder_symbolic
