#!/usr/bin/env bash
# The plugin is built for the Slurm an admin names, not only /usr's (issue 55): a Slurm installed
# in a prefix of its own (here a copy of this machine's Slurm headers, in $work/opt/slurm, with a
# lib64/slurm plugin directory as Slurm's RPMs and source builds lay it out), named by
# -DSLURM_ROOT=PREFIX or found through the slurm.pc that such a Slurm installs (pkg-config). The
# plugin is built against that Slurm's headers and installed into that Slurm's plugin directory,
# and the plugstack.conf snippet names it there. A SLURM_ROOT without Slurm's headers fails the
# configure with a message that names it.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d /tmp/hydro-slurm-root.XXXXXX)
trap 'rm -rf "$work"' EXIT
slurm=$work/opt/slurm
mkdir -p "$slurm/include" "$slurm/lib64/slurm" "$slurm/lib64/pkgconfig" "$work/empty"
cp -r /usr/include/slurm "$slurm/include/"
cp "$(find /usr/lib -name proctrack_linuxproc.so | head -1)" "$slurm/lib64/slurm/"
number=$(grep -oP '^#define SLURM_VERSION_NUMBER 0x\K[0-9a-fA-F]{6}' "$slurm/include/slurm/slurm_version.h") ||
  fail "no SLURM_VERSION_NUMBER in /usr/include/slurm/slurm_version.h"
release=$((16#${number:0:2}))$(printf '%02d' $((16#${number:2:2})))
version=$((16#${number:0:2})).$(printf '%02d' $((16#${number:2:2}))).$((16#${number:4:2}))
cat >"$slurm/lib64/pkgconfig/slurm.pc" <<PC
libdir=$slurm/lib64
includedir=$slurm/include

Name: slurm
Description: Slurm Workload Manager
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lslurm
PC
# configure DIR ARGS...: hydro's plugin and the core alone (no libtorch), installed under $work/usr.
configure() {
  cmake -S "$top" -B "$1" -DHYDRO_BUILD_TORCH=OFF -DHYDRO_BUILD_TESTS=OFF -DHYDRO_BUILD_EXAMPLES=OFF \
    -DHYDRO_BUILD_TOOLS=ON -DHYDRO_BUILD_SPANK=ON -DCMAKE_INSTALL_PREFIX="$work/usr" "${@:2}" >"$1.log" 2>&1
}
check_found() {  # check_found DIR FROM: its configure found $slurm through FROM
  grep -qF "hydro: the plugin is built for Slurm $release ($2: $slurm/include)" "$1.log" ||
    fail "$1: not built for $slurm's Slurm $release through $2: $(grep 'hydro:' "$1.log")"
  grep -qF "hydro: the plugin installs into $slurm/lib64/slurm" "$1.log" ||
    fail "$1: the plugin does not install into $slurm/lib64/slurm: $(grep 'hydro:' "$1.log")"
  grep -q "^required $slurm/lib64/slurm/spank_hydro.so " "$1/etc/plugstack.conf.d/hydro.conf" ||
    fail "$1: the plugstack.conf snippet names another plugin: $(grep '^required' "$1/etc/plugstack.conf.d/hydro.conf")"
}

configure "$work/by-root" -DSLURM_ROOT="$slurm" || fail "configure with SLURM_ROOT=$slurm failed: $(tail -5 "$work/by-root.log")"
check_found "$work/by-root" "SLURM_ROOT=$slurm"
PKG_CONFIG_PATH=$slurm/lib64/pkgconfig configure "$work/by-pc" || fail "configure with pkg-config's slurm failed"
check_found "$work/by-pc" "pkg-config's slurm $version"

# Built against it and installed into its plugin directory (the plugin's own install rules).
cmake --build "$work/by-root" --target spank_hydro -j "$(nproc)" >"$work/build.log" 2>&1 ||
  fail "the plugin did not build: $(tail -20 "$work/build.log")"
rm "$slurm/lib64/slurm/proctrack_linuxproc.so"
(cd "$work/by-root/spank" && cmake -DCMAKE_INSTALL_LOCAL_ONLY=1 -P cmake_install.cmake >/dev/null) || fail "its install failed"
grep -q ' slurm_spank_init$' <<<"$(nm -D --defined-only "$slurm/lib64/slurm/spank_hydro.so")" ||
  fail "no plugin with slurm_spank_init in $slurm/lib64/slurm"

if configure "$work/none" -DSLURM_ROOT="$work/empty"; then fail "a SLURM_ROOT without Slurm's headers configured"; fi
grep -qF "no slurm/spank.h in SLURM_ROOT=$work/empty Slurm" <<<"$(tr -s ' \n' ' ' <"$work/none.log")" ||
  fail "the error does not name SLURM_ROOT: $(grep -A2 'Error' "$work/none.log")"
echo "PASS slurm_root: built for Slurm $version in $slurm (SLURM_ROOT and pkg-config), installed into its lib64/slurm"
