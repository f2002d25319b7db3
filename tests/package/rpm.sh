#!/usr/bin/env bash
# Issue 55, RHEL-family nodes: rpm/hydro.spec, built by rpmbuild (scripts/package --rpm, here Debian's
# rpm), gives the five packages with the Debian packages' contents at the paths of Slurm's RPM
# layout (rpm -qlp of each against dpkg -c of its Debian twin); the plugstack line names the RPM's
# plugin and is a config file; nothing links libtorch but the library and the binding, and no
# package requires a libtorch package; installed into a scratch root and erased, the plugstack line
# goes with the plugin, so no node keeps a `required` line that names a missing plugin. Needs root
# (rpm --root). Takes the packages of HYDRO_TEST_RPMS (built beside by scripts/test, with the debs),
# else builds both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
source "$top/scripts/paths.sh"  # hydro_version
fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "== $*"; }
[ "$(id -u)" = 0 ] || fail "rpm --root needs root"
command -v rpm >/dev/null || fail "rpm is missing: run scripts/setup"
work=$(mktemp -d /tmp/hydro-rpm.XXXXXX)
trap 'rm -rf "$work"' EXIT
pkgs=${HYDRO_TEST_RPMS:-}
if [ -z "$pkgs" ]; then
  note "scripts/package --deb --rpm"
  "$top/scripts/package" --deb --rpm --out "$work/pkgs" | sed 's/^/    | /'
  pkgs=$work/pkgs
fi
version=$(hydro_version)
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

# The Debian package each RPM stands for.
declare -A twin=([hydro-slurm-plugin]=hydro-slurm-plugin [hydro-tools]=hydro-tools [hydro-libs]=libhydro0
                 [hydro-devel]=libhydro-dev [python3-hydro]=python3-hydro)
rpm_of() { echo "$pkgs/$1-$version-1.$(uname -m).rpm"; }
deb_of() { echo "$pkgs/$1_${version}_$(dpkg --print-architecture).deb"; }

# A package's files and links, documentation and licences aside, at RPM's paths: Slurm's plugin
# directory and the library directory are /usr/lib64's, man pages compressed or not.
files_of_deb() {
  dpkg-deb -c "$1" | awk '$1 !~ /^d/ {print $6}' | sed 's|^\./|/|' | grep -v '^/usr/share/doc/' |
    sed -e "s|^/usr/lib/$triplet/slurm-wlm/|/usr/lib64/slurm/|" -e "s|^/usr/lib/$triplet/|/usr/lib64/|" -e 's|\.gz$||' | sort
}
files_of_rpm() {
  rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$1" | awk '$1 !~ /^d/ {print $2}' |
    grep -vE '^/usr/share/(doc|licenses)/' | sed 's|\.gz$||' | sort
}

note "each package's files (rpm -qlp) against its Debian twin's (dpkg -c)"
for p in "${!twin[@]}"; do
  r=$(rpm_of "$p") d=$(deb_of "${twin[$p]}")
  [ -f "$r" ] || fail "no $r (rpmbuild made: $(cd "$pkgs" && echo *.rpm))"
  [ -f "$d" ] || fail "no $d"
  diff <(files_of_deb "$d") <(files_of_rpm "$r") >"$work/diff" ||
    fail "$p's files differ from ${twin[$p]}'s (< the .deb, > the .rpm):
$(cat "$work/diff")"
  echo "    $p: $(files_of_rpm "$r" | wc -l) files, as ${twin[$p]}"
done
[ "$(ls "$pkgs"/*.rpm | wc -l)" = 5 ] || fail "rpmbuild made other packages than the five: $(cd "$pkgs" && echo *.rpm)"
grep -qx /usr/lib64/slurm/spank_hydro.so <<<"$(rpm -qlp "$(rpm_of hydro-slurm-plugin)")" || fail "the plugin is not in /usr/lib64/slurm"
grep -q '/loop.py$' <<<"$(rpm -qlp "$(rpm_of python3-hydro)")" || fail "python3-hydro lacks the example loop.py"

note "the config files, and what the packages require"
configs=$(rpm -qp --configfiles "$(rpm_of hydro-slurm-plugin)")
[ "$configs" = $'/etc/hydro/hydro.yaml\n/etc/slurm/plugstack.conf.d/hydro.conf' ] || fail "the plugin's config files: $configs"
for p in "${!twin[@]}"; do
  ! grep -E 'lib(torch|c10)' <<<"$(rpm -qp --requires "$(rpm_of "$p")")" || fail "$p requires libtorch by name"
done
grep -qx "hydro-libs(x86-64) = $version-1" <<<"$(rpm -qp --requires "$(rpm_of python3-hydro)")" ||
  fail "python3-hydro does not require hydro-libs $version-1"

note "installed into a scratch root (rpm --root), then erased"
root=$work/root
rpm --root "$root" --initdb
rpm --root "$root" -i --nodeps "$pkgs"/*.rpm >"$work/install.log" 2>&1 || fail "rpm -i: $(cat "$work/install.log")"
snippet=$root/etc/slurm/plugstack.conf.d/hydro.conf
line=$(grep -v '^#' "$snippet")
[ "$line" = "required /usr/lib64/slurm/spank_hydro.so config=/etc/hydro/hydro.yaml" ] || fail "$snippet: $line"
for f in "$root/usr/lib64/slurm/spank_hydro.so" "$root/usr/bin/hydro-launch" "$root/usr/bin/hydroctl"; do
  ! grep -qE 'lib(torch|c10)' <<<"$(readelf -d "$f")" || fail "$f links libtorch"
done
for f in $(find "$root/usr" -type f -name '*.so*') "$root/usr/bin/hydro-launch" "$root/usr/bin/hydroctl"; do
  ! grep -E 'R(UN)?PATH.*(/tmp/|obj-|build)' <<<"$(readelf -d "$f")" || fail "$f has an RPATH into the build tree"
done
rpm --root "$root" -e --nodeps hydro-slurm-plugin 2>/dev/null
[ ! -e "$snippet" ] || fail "erasing the plugin left $snippet, whose required line names a missing plugin"
rpm --root "$root" -i --nodeps "$(rpm_of hydro-slurm-plugin)" 2>/dev/null  # Debian's rpm warns: use alien
echo '# edited by the admin' >>"$snippet"
rpm --root "$root" -e --nodeps hydro-slurm-plugin 2>/dev/null
[ ! -e "$snippet" ] && [ -e "$snippet.rpmsave" ] || fail "erasing an edited plugstack line did not set it aside as hydro.conf.rpmsave"
note "PASS rpm: hydro $version's five RPM packages hold the Debian packages' files at RPM's paths"
