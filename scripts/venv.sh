#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and link it at .venv.
#
# The environment is about 7 GB (torch 2.9.1 is a CUDA build), so it lives in a cache folder keyed by
# the Python version and the dependency pins of pyproject.toml: repeated runs and CI on the same
# machine reuse it, and a change of any pin builds a new one. The project itself is (re)installed
# editable on every run, so the environment always imports this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

export PYENV_VERSION="${PYENV_VERSION:-$(cat .python-version)}"
python_bin="${THUNDER_SYMBOLIC_PYTHON:-python${PYENV_VERSION%.*}}"
command -v "$python_bin" >/dev/null || python_bin=python3
case "$("$python_bin" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')" in
  3.12) ;;
  *) echo "venv.sh: Python 3.12 is required (nvfuser-cu128-torch29 ships cp312 wheels only); set THUNDER_SYMBOLIC_PYTHON" >&2; exit 1 ;;
esac

key=$("$python_bin" - <<'PY'
import hashlib, json, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
pins = {"python": sys.version, "deps": project["dependencies"], "extras": project["optional-dependencies"]}
print(hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()[:16])
PY
)
cache="${THUNDER_SYMBOLIC_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/thunder-symbolic}"
venv="$cache/venv-$key"

if [ ! -f "$venv/.complete" ]; then
  echo "venv.sh: building $venv (about 7 GB, a few minutes)" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python_bin" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -e ".[test,bench]"
  touch "$venv/.complete"
else
  "$venv/bin/python" -m pip install --quiet --no-deps -e .
fi

if [ -e .venv ] && [ ! -L .venv ]; then
  echo "venv.sh: .venv exists and is not a link; remove it to use the cached environment" >&2
  exit 1
fi
ln -sfn "$venv" .venv
