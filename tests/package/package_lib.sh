# Helpers for tests/package/install.sh: build-free checks of the installed Debian packages.
packages="hydro-slurm-plugin hydro-tools libhydro0 libhydro-dev python3-hydro"
snippet=/etc/slurm/plugstack.conf.d/hydro.conf
site_pth=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/hydro-build.pth

fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "== $*"; }

# Leaves the machine as the test found it.
cleanup() {
  local rc=$?
  "$top/scripts/slurm-local" stop --dir "$HYDRO_SLURM_DIR" >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq $packages >/dev/null 2>&1 || true
  [ ! -f "$work/hydro-build.pth" ] || mv "$work/hydro-build.pth" "$site_pth"
  rm -rf "$work" /tmp/hydro-pkg-ck /tmp/hydro-loop.*.py
  exit $rc
}

# The build's hydro-build.pth would put the build's hydro on /usr/bin/python3's path.
hide_the_build() {
  [ ! -f "$site_pth" ] || mv "$site_pth" "$work/hydro-build.pth"
  unset PYTHONPATH HYDRO_BUILD_DIR
}

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Options::=--force-confdef \
    -o Dpkg::Options::=--force-confold "$@" >"$work/apt.log" 2>&1 || { tail -30 "$work/apt.log" >&2; fail "apt-get install $*"; }
}

installed_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }

# lintian's errors fail; each warning must be listed, with its reason, in the lintian table of the
# admin's guide (docs/admins-guide.md, "Installing on a cluster").
check_lintian() {
  local debs=$1 guide=$2 out tag
  out=$(lintian --fail-on error --tag-display-limit 0 "$debs"/*.deb 2>&1) || fail "lintian found errors:
$out"
  for tag in $(sed -n 's/^W: [^ ]*: \([^ ]*\).*/\1/p' <<<"$out" | sort -u); do
    grep -q "^| \`$tag\` |" "$guide" || fail "lintian warns $tag, which the lintian table of $guide does not list:
$(grep -- " $tag" <<<"$out")"
  done
  tag=$(sed -n 's/^W: [^ ]*: \([^ ]*\).*/\1/p' <<<"$out" | sort -u | tr '\n' ' ')
  note "lintian: no errors; warnings (each listed in $guide): ${tag:-none}"
}

# The same packages as version PREV (dependencies between them too), with a hydro.yaml that differs
# from the new one's, so that the upgrade meets a conffile both sides changed.
make_previous() {
  local from=$1 to=$2 prev=$3 deb dir
  mkdir -p "$to" "$work/repack"
  for deb in "$from"/*.deb; do
    dir=$work/repack/$(basename "$deb" .deb)
    dpkg-deb -R "$deb" "$dir"
    sed -i -e "s/^Version: .*/Version: $prev/" -e "s/(= $version)/(= $prev)/g" "$dir/DEBIAN/control"
    if [ -f "$dir/etc/hydro/hydro.yaml" ]; then
      echo "# as shipped by hydro $prev" >>"$dir/etc/hydro/hydro.yaml"
      (cd "$dir" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | grep -zv '^etc/' | xargs -0 md5sum >DEBIAN/md5sums)
    fi
    dpkg-deb --root-owner-group -b "$dir" "$to/$(basename "$deb")" >/dev/null
  done
}

check_versions() {
  local v=$1
  [ "$(hydro-launch --version)" = "hydro-launch $v" ] || fail "hydro-launch --version: $(hydro-launch --version)"
  [ "$(hydroctl --version)" = "hydroctl $v" ] || fail "hydroctl --version: $(hydroctl --version)"
  [ "$(cd / && /usr/bin/python3 -c 'import hydro; print(hydro.__version__)')" = "$v" ] || fail "hydro.__version__ is not $v"
  note "hydro-launch, hydroctl and hydro.__version__ all say $v"
}

# Everything where Slurm, the shell and Python look, and nothing that points into a build tree.
check_paths() {
  local line so f py
  [ "$(command -v hydro-launch)" = /usr/bin/hydro-launch ] || fail "hydro-launch is not /usr/bin's"
  [ "$(command -v hydroctl)" = /usr/bin/hydroctl ] || fail "hydroctl is not /usr/bin's"
  line=$(grep -v '^#' "$snippet") || fail "no $snippet"
  so=$(awk '{print $2}' <<<"$line")
  [ -f "$so" ] || fail "$snippet names $so, which is not installed"
  [ "$(awk '{print $3}' <<<"$line")" = config=/etc/hydro/hydro.yaml ] || fail "$snippet: $line"
  [ -f /usr/share/man/man1/hydro-launch.1.gz ] && [ -f /usr/share/man/man1/hydroctl.1.gz ] || fail "no man pages"
  [ "$(bash -c 'source /usr/share/bash-completion/completions/hydroctl; COMP_WORDS=(hydroctl pa); COMP_CWORD=1
                _hydroctl; echo "${COMPREPLY[*]}"')" = pause ] || fail "hydroctl's bash completion does not complete 'pa'"
  py=$(cd / && /usr/bin/python3 -c 'import hydro; print(hydro.__file__)')
  [[ $py == /usr/lib/python3/dist-packages/hydro/* ]] || fail "/usr/bin/python3 imports hydro from $py"
  [ -f /usr/lib/python3/dist-packages/hydro-autopause.pth ] || fail "the zero-lines pause hook is not installed"
  for f in $(dpkg -L $packages | sort -u); do
    [ -f "$f" ] && [ "$(od -An -c -N4 "$f" | tr -d ' ')" = 177ELF ] || continue
    ! grep -qiE 'r(un)?path' <<<"$(readelf -d "$f")" || fail "$f has an RPATH: $(readelf -d "$f" | grep -iE 'r(un)?path')"
  done
  note "installed: $so ($line), /usr/bin/hydro-launch, /usr/bin/hydroctl, man pages, bash completion, $(dirname "$py")"
}

start_installed_cluster() {
  local out
  out=$("$top/scripts/slurm-local" start --proctrack linuxproc --dir "$HYDRO_SLURM_DIR" --plugstack /etc/slurm/plugstack.conf) ||
    fail "could not start Slurm with /etc/slurm/plugstack.conf"
  eval "$out"
}

# Removing the plugin sets its plugstack line aside, so jobs still run; installing it again brings
# the line back.
check_remove_and_reinstall() {
  local debs=$1 v=$2
  start_installed_cluster
  grep -q "hydro $v: spank_hydro.so" "$HYDRO_SLURM_DIR/log/slurmd.log" || fail "slurmd's log does not name hydro $v"
  note "slurmd.log: $(grep -o "hydro $v: spank_hydro.so.*" "$HYDRO_SLURM_DIR/log/slurmd.log" | head -1)"
  grep -q -- --hydro-pause <<<"$(srun --help)" || fail "srun --help has no --hydro-pause"
  note "apt-get remove hydro-slurm-plugin: jobs still run, without hydro's options"
  DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq hydro-slurm-plugin >/dev/null
  [ ! -e "$snippet" ] && [ -e "$snippet.removed" ] || fail "removing the plugin left $snippet in place"
  srun true || fail "a job failed on a node whose hydro plugin was removed"
  ! grep -q -- --hydro <<<"$(srun --help)" || fail "srun --help still offers --hydro options"
  note "apt-get install hydro-slurm-plugin again: the line is back"
  apt_install "$debs"/hydro-slurm-plugin_*.deb
  [ -e "$snippet" ] && [ ! -e "$snippet.removed" ] || fail "reinstalling did not bring $snippet back"
  grep -q '^# edited by the admin' /etc/hydro/hydro.yaml || fail "remove and reinstall lost the admin's hydro.yaml"
  srun --hydro-pause=on true || fail "srun --hydro-pause=on failed after the reinstall"
  "$top/scripts/slurm-local" stop --dir "$HYDRO_SLURM_DIR" >/dev/null
}

check_purge() {
  note "apt-get purge: nothing of hydro is left"
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq $packages >/dev/null
  local left
  left=$(ls -d /etc/hydro "$snippet" "$snippet.removed" /usr/bin/hydro-launch /usr/lib/python3/dist-packages/hydro 2>/dev/null || true)
  [ -z "$left" ] || fail "purge left: $left"
  ! (cd / && /usr/bin/python3 -c 'import hydro' 2>/dev/null) || fail "hydro still imports after the purge"
}
