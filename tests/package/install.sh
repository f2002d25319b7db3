#!/usr/bin/env bash
# Issue 17 on this machine: scripts/package builds the Debian packages; lintian leaves only the
# warnings docs/admins-guide.md lists; they install over an older version without losing the admin's
# edits; a real Slurm with Debian's own plugstack.conf runs --hydro-pause jobs through the
# suspend/requeue path with only what they installed (tests/integration/suspend_requeue.sh,
# HYDRO_TEST_INSTALLED); find_package(hydro) needs no prefix; /usr/bin/python3 imports the installed
# hydro; removing the plugin leaves a Slurm that runs jobs; purging leaves nothing. Needs root;
# leaves the machine as it found it (the packages purged, the build's hydro-build.pth back in
# place).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
source "$top/scripts/paths.sh"  # hydro_version
export HYDRO_SLURM_DIR=${HYDRO_SLURM_DIR:-/tmp/hydro-test-slurm}
source "$here/package_lib.sh"
[ "$(id -u)" = 0 ] || fail "installing packages needs root"

work=$(mktemp -d /tmp/hydro-pkg.XXXXXX)
chmod 0755 "$work"
trap cleanup EXIT
if [ -n "${HYDRO_TEST_DEBS:-}" ]; then  # re-running the checks on packages built before
  note "the packages in $HYDRO_TEST_DEBS"
  mkdir -p "$work/debs" && cp "$HYDRO_TEST_DEBS"/*.deb "$work/debs"/
else
  note "scripts/package"
  "$top/scripts/package" --out "$work/debs" | sed 's/^/    | /'
fi
version=$(hydro_version)
check_lintian "$work/debs" "$top/docs/admins-guide.md"
hide_the_build

note "install $version~prev (the same packages, an older version whose hydro.yaml differs), edit hydro.yaml"
make_previous "$work/debs" "$work/prev" "$version~prev"
apt_install "$work/prev"/*.deb
[ "$(installed_version hydro-slurm-plugin)" = "$version~prev" ] || fail "the previous version did not install"
mkdir -p /tmp/hydro-pkg-ck && chmod 1777 /tmp/hydro-pkg-ck
printf '\n# edited by the admin\ncheckpoint_dir: /tmp/hydro-pkg-ck/%%u/%%j\n' >>/etc/hydro/hydro.yaml

note "upgrade to $version: the admin's hydro.yaml stays"
apt_install "$work/debs"/*.deb
for p in $packages; do [ "$(installed_version "$p")" = "$version" ] || fail "$p is not at $version after the upgrade"; done
grep -q '^# edited by the admin' /etc/hydro/hydro.yaml || fail "the upgrade lost the admin's edit of /etc/hydro/hydro.yaml"
[ -f /etc/hydro/hydro.yaml.dpkg-dist ] || fail "dpkg did not keep the new hydro.yaml beside the admin's"
check_versions "$version"
check_paths

note "find_package(hydro) with no CMAKE_PREFIX_PATH, against libhydro-dev"
cmake -S "$top/tests/install/consumer" -B "$work/consumer" >/dev/null || fail "find_package(hydro) failed"
cmake --build "$work/consumer" >/dev/null || fail "the consumer did not build against the installed headers"
out=$(cd "$work" && HYDRO_CKPT_DIR=$work/ck "$work/consumer/consumer" 2>/dev/null)
[ "$out" = "consumer: trained to step 3" ] || fail "the consumer did not train ($out)"
grep -qE "libhydro.so.0 => (/usr)?/lib/$(gcc -print-multiarch)/" <<<"$(ldd "$work/consumer/consumer")" || fail "the consumer did not link the installed libhydro"

note "Slurm with Debian's /etc/slurm/plugstack.conf: suspend, resume and requeue a Python job"
HYDRO_TEST_INSTALLED=1 HYDRO_TEST_PROGRAM=python \
  "$top/tests/integration/suspend_requeue.sh" cgroup >"$work/suspend_requeue.log" 2>&1 ||
  { sed 's/^/    | /' "$work/suspend_requeue.log"; fail "suspend_requeue.sh failed with the installed packages"; }
sed 's/^/    | /' "$work/suspend_requeue.log"
ls -d /tmp/hydro-pkg-ck/root/* >/dev/null 2>&1 || fail "no checkpoint under the admin's checkpoint_dir"

check_remove_and_reinstall "$work/debs" "$version"
check_purge
note "PASS package: hydro $version built, linted, upgraded, run on Slurm, removed and purged"
