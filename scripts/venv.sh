#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment for one torch lane and link it in the checkout.
#
# Lanes are the files requirements/torch-MAJOR.MINOR.txt (the torch pin and, where a wheel exists,
# nvFuser's). TORCH=2.14 (or 2.14.1) picks a lane and links it at .venv-torch-2.14; without TORCH the
# default lane (DEFAULT_TORCH below: the newest torch with an nvFuser wheel) is linked at .venv.
#
# An environment is about 7 GB (PyPI's torch is a CUDA build), so it lives in a cache folder keyed by
# the Python version, pyproject.toml's pins and the lane file: repeated runs and CI on the same machine
# reuse it, and a change of any pin builds a new one. The project itself is (re)installed editable on
# every run, so the environment always imports this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

DEFAULT_TORCH=2.10

export PYENV_VERSION="${PYENV_VERSION:-$(cat .python-version)}"
python_bin="${THUNDER_SYMBOLIC_PYTHON:-python${PYENV_VERSION%.*}}"
command -v "$python_bin" >/dev/null || python_bin=python3
case "$("$python_bin" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')" in
  3.12) ;;
  *) echo "venv.sh: Python 3.12 is required (nvFuser ships cp312 wheels only); set THUNDER_SYMBOLIC_PYTHON" >&2; exit 1 ;;
esac

torch_series=$(echo "${TORCH:-$DEFAULT_TORCH}" | cut -d. -f1,2)
lane="requirements/torch-$torch_series.txt"
if [ ! -f "$lane" ]; then
  lanes=$(cd requirements && ls torch-*.txt | sed 's/^torch-//; s/\.txt$//' | sort -V | tr '\n' ' ')
  echo "venv.sh: no lane for TORCH=$TORCH; supported torch series: $lanes" >&2
  exit 2
fi
pinned=$(sed -n 's/^torch==//p' "$lane")
case "${TORCH:-$torch_series}" in
  "$torch_series" | "$pinned") ;;
  *) echo "venv.sh: the torch $torch_series lane pins torch $pinned; use TORCH=$torch_series" >&2; exit 2 ;;
esac
link=$([ -n "${TORCH:-}" ] && echo ".venv-torch-$torch_series" || echo ".venv")

key=$("$python_bin" - "$lane" <<'PY'
import hashlib, json, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
pins = {
    "python": sys.version,
    "deps": project["dependencies"],
    "extras": project["optional-dependencies"],
    "lane": open(sys.argv[1]).read(),
}
print(hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()[:16])
PY
)
cache="${THUNDER_SYMBOLIC_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/thunder-symbolic}"
venv="$cache/venv-torch$torch_series-$key"

if [ ! -f "$venv/.complete" ]; then
  echo "venv.sh: building $venv for torch $torch_series (about 7 GB, a few minutes)" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python_bin" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -e ".[test,bench,upstream-test]" -r "$lane"
  touch "$venv/.complete"
else
  "$venv/bin/python" -m pip install --quiet --no-deps -e .
fi

if [ -e "$link" ] && [ ! -L "$link" ]; then
  echo "venv.sh: $link exists and is not a link; remove it to use the cached environment" >&2
  exit 1
fi
ln -sfn "$venv" "$link"
