#!/usr/bin/env bash
# `pip install` as a new user runs it: a fresh virtual environment, torch from PyPI, then hydro from
# the checkout (pip_venv.sh: in HYDRO_TEST_PIP_DIR when scripts/test made it beside the main tier's
# tests, waited for here; else here). Then, with nothing of the build on the path, that interpreter
# runs examples/loop.py under the venv's own hydro-launch (pip installs it in bin/) on a real Slurm (suspended, resumed, requeued,
# ending bit-for-bit: suspend_requeue.sh), and the .pth hook pauses an unchanged script
# (python_autopause.sh). One build: pip install builds the wheel it installs, and its RECORD says
# what the wheel held.
# Run alone, it makes the venv first, here, where pip has the network: lib.sh then runs the rest in
# a host of its own (own_host.sh: its own network namespace), like any Slurm test, beside others.
if [ -z "${HYDRO_TEST_PIP_DIR:-}" ]; then
  HYDRO_TEST_PIP_DIR=$(mktemp -d /tmp/hydro-pip-venv.XXXXXX) HYDRO_TEST_PIP_OWNED=1
  export HYDRO_TEST_PIP_DIR HYDRO_TEST_PIP_OWNED
  trap 'rm -rf "$HYDRO_TEST_PIP_DIR"' EXIT  # killed while pip runs; after lib.sh's exec, the trap below
  "$(dirname "$0")/pip_venv.sh" "$HYDRO_TEST_PIP_DIR" || true  # its exit status is in its rc file, read below
  trap - EXIT
fi
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
work=$(mktemp -d /tmp/hydro-pip.XXXXXX)
pip_dir=$HYDRO_TEST_PIP_DIR
trap 'rm -rf "$work"; [ -z "${HYDRO_TEST_PIP_OWNED:-}" ] || rm -rf "$pip_dir"' EXIT
if [ -z "${HYDRO_TEST_PIP_OWNED:-}" ]; then
  note "the venv of pip_venv.sh, run by scripts/test beside the main tier's tests, in $pip_dir"
  wait_for "$pip_dir/rc" '^[0-9]+$' 2400  # its exit status, written last
fi
sed -n 's/^== //p' "$pip_dir/pip.log" | while IFS= read -r l; do note "$l"; done
[ "$(cat "$pip_dir/rc")" = 0 ] || { tail -40 "$pip_dir/pip.log"; fail "pip_venv.sh failed (above)"; }
site=$("$pip_dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
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
where=$(cd / && env -u PYTHONPATH "$pip_dir/venv/bin/python" -c 'import hydro, torch; print(hydro.__file__, torch.__version__)') ||
  fail "the venv cannot import hydro"
[[ $where == "$site/hydro/"* ]] || fail "the venv imports hydro from elsewhere: $where"
note "the venv imports $where"

# Built for one torch and imported under another: an ImportError naming both, never a crash.
mkdir "$work/other" && cp -r "$site/hydro" "$work/other/"
err=$(cd / && PYTHONPATH="$work/other" /usr/bin/python3 -c 'import hydro' 2>&1) && fail "hydro for ${where#* } imported under Debian's torch"
grep -q "hydro was built for torch ${where#* } but this interpreter has torch" <<<"$err" || fail "no clear error under another torch: $err"
note "under another torch: $(grep -o 'hydro was built for.*(from' <<<"$err")"

# hydro-launch, in the venv's bin/ beside python: it runs, and it never loads libtorch.
launcher=$pip_dir/venv/bin/hydro-launch
grep -qE '^bin/hydro-launch$|/bin/hydro-launch$' <<<"$listing" || fail "the wheel has no bin/hydro-launch: $listing"
[ "$("$launcher" --version)" = "hydro-launch $(hydro_version)" ] ||
  fail "the venv's hydro-launch --version: $("$launcher" --version 2>&1)"
! grep -qE 'lib(torch|c10)' <<<"$(ldd "$launcher")" || fail "the venv's hydro-launch links libtorch: $(ldd "$launcher")"
note "the venv's $launcher: $("$launcher" --version), no libtorch"

export HYDRO_TEST_PYTHON=$pip_dir/venv/bin/python HYDRO_TEST_PROGRAM=python HYDRO_TEST_LAUNCH=$launcher
"$top/tests/integration/suspend_requeue.sh" "$proctrack" || fail "the Slurm path with the pip-installed hydro failed"
"$top/tests/integration/python_autopause.sh" "$proctrack" || fail "the .pth hook of the pip-installed hydro did not pause"
echo "PASS pip_install ($proctrack)"
