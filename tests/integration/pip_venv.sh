#!/usr/bin/env bash
# The first half of pip.install: what a new user runs. A fresh virtual environment in DIR/venv,
# torch from PyPI (the version python/requirements.txt pins; pip's cache holds it after
# scripts/setup), then hydro from the checkout, built against that torch by pyproject.toml
# (scikit-build-core). Its output goes to DIR/pip.log, and its exit status to DIR/rc, last.
# scripts/test runs it beside the main tier's tests, at the lowest priority (the CPUs are mostly
# idle while the Slurm tests' jobs run), and pip_install.sh waits for it; alone, pip_install.sh
# runs it itself.
#   pip_venv.sh DIR
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:?usage: pip_venv.sh DIR}
mkdir -p "$dir" && rm -f "$dir/rc"
make_venv() {
  local torch_pin pip
  torch_pin=$(grep -m1 '^torch==' "$top/python/requirements.txt") || { echo "python/requirements.txt pins no torch"; return 1; }
  echo "== a fresh virtual environment, then pip install $torch_pin"
  /usr/bin/python3 -m venv "$dir/venv" || { echo "python3 -m venv failed (python3-venv)"; return 1; }
  pip=("$dir/venv/bin/pip" --disable-pip-version-check -q)
  "${pip[@]}" install "$torch_pin" || { echo "pip install $torch_pin failed"; return 1; }
  echo "== pip install $top"
  (cd "$dir" && "${pip[@]}" install "$top") || { echo "pip install $top failed"; return 1; }
}
make_venv >"$dir/pip.log" 2>&1
rc=$?
echo "$rc" >"$dir/rc.tmp" && mv "$dir/rc.tmp" "$dir/rc"
exit "$rc"
