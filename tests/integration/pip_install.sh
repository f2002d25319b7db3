#!/usr/bin/env bash
# `pip install` as a new user runs it: a fresh virtual environment, torch from PyPI (the version
# python/requirements.txt pins; pip's cache holds it after scripts/setup), then hydro from the
# checkout, built against that torch by pyproject.toml (scikit-build-core). Then, with nothing of
# the build on the path, that interpreter runs examples/loop.py under srun hydro-launch on a real
# Slurm (suspended, resumed, requeued, ending bit-for-bit: suspend_requeue.sh), and the .pth hook
# pauses an unchanged script (python_autopause.sh). One build: pip install builds the wheel it
# installs, and its RECORD says what the wheel held.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
work=$(mktemp -d /tmp/hydro-pip.XXXXXX)
trap 'rm -rf "$work"' EXIT
torch_pin=$(grep -m1 '^torch==' "$top/python/requirements.txt") || fail "python/requirements.txt pins no torch"

note "a fresh virtual environment, then pip install $torch_pin"
/usr/bin/python3 -m venv "$work/venv" || fail "python3 -m venv failed (python3-venv)"
pip=("$work/venv/bin/pip" --disable-pip-version-check -q)
"${pip[@]}" install "$torch_pin" >"$work/pip-torch.log" 2>&1 || { tail -20 "$work/pip-torch.log"; fail "pip install $torch_pin failed"; }

note "pip install $top"
(cd "$work" && "${pip[@]}" install "$top") >"$work/pip-hydro.log" 2>&1 || { tail -40 "$work/pip-hydro.log"; fail "pip install $top failed"; }
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
# What the wheel held, as pip recorded it: its RECORD and its METADATA's license.
dist=$(ls -d "$site"/hydro-*.dist-info) || fail "pip install left no hydro dist-info in $site"
listing=$(cut -d, -f1 "$dist/RECORD"; grep '^License' "$dist/METADATA" | sed 's/^/  /')
for f in hydro-autopause.pth _hydro_autopause.py hydro/__init__.py hydro/_build.py 'hydro/_C\..*\.so' 'hydro/libhydro\.so' \
  hydro/hydro-cuda-checkpoint; do
  grep -qE "^$f\$" <<<"$listing" || fail "the wheel has no $f: $listing"
done
grep -q 'License-Expression: Apache-2.0' <<<"$listing" || fail "the wheel's metadata names no Apache-2.0 license"
[ -f "$site/hydro-autopause.pth" ] || fail "pip install put no hydro-autopause.pth in $site"
# HYDRO_GPU_RELEASE=full's helper, beside libhydro where the runtime looks for it, and runnable.
grep -q '^usage: hydro-cuda-checkpoint' <<<"$("$site/hydro/hydro-cuda-checkpoint" --help)" ||
  fail "the wheel's hydro-cuda-checkpoint does not run"
where=$(cd / && env -u PYTHONPATH "$work/venv/bin/python" -c 'import hydro, torch; print(hydro.__file__, torch.__version__)') ||
  fail "the venv cannot import hydro"
[[ $where == "$site/hydro/"* ]] || fail "the venv imports hydro from elsewhere: $where"
note "the venv imports $where"

# Built for one torch and imported under another: an ImportError naming both, never a crash.
mkdir "$work/other" && cp -r "$site/hydro" "$work/other/"
err=$(cd / && PYTHONPATH="$work/other" /usr/bin/python3 -c 'import hydro' 2>&1) && fail "hydro for ${where#* } imported under Debian's torch"
grep -q "hydro was built for torch ${where#* } but this interpreter has torch" <<<"$err" || fail "no clear error under another torch: $err"
note "under another torch: $(grep -o 'hydro was built for.*(from' <<<"$err")"

export HYDRO_TEST_PYTHON=$work/venv/bin/python HYDRO_TEST_PROGRAM=python
"$top/tests/integration/suspend_requeue.sh" "$proctrack" || fail "the Slurm path with the pip-installed hydro failed"
"$top/tests/integration/python_autopause.sh" "$proctrack" || fail "the .pth hook of the pip-installed hydro did not pause"
echo "PASS pip_install ($proctrack)"
