# Where hydro's builds and its Python environment are, and how scripts/ builds them, in one place:
# sourced by every script in scripts/ and by the tests' helpers. Each can be moved with its variable.
#   build          the main tier: torch 2.15.0 from PyPI in $venv (HYDRO_BUILD_DIR)
#   oldest_build   the oldest tier: Debian 12's libtorch 1.13.1 and /usr/bin/python3
#                  (HYDRO_OLDEST_BUILD_DIR)
#   sanitize_build the sanitize tier, built with clang, AddressSanitizer and UBSan (scripts/fuzz
#                  --build): the fuzz targets and the unit tests of the layers without libtorch
#                  (HYDRO_SANITIZE_BUILD_DIR)
#   debian13_root  the Debian 13 tier's root: a Debian 13 system that scripts/debian13 makes and
#                  enters (HYDRO_DEBIAN13_ROOT)
#   debian13_build the Debian 13 tier: its libtorch 2.6 and python3, built inside that root
#                  (HYDRO_DEBIAN13_BUILD_DIR)
#   venv           the virtual environment of the main tier, made by scripts/setup from
#                  python/requirements.txt (HYDRO_VENV)
hydro_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${HYDRO_BUILD_DIR:-$hydro_top/build}
oldest_build=${HYDRO_OLDEST_BUILD_DIR:-$hydro_top/build-oldest}
sanitize_build=${HYDRO_SANITIZE_BUILD_DIR:-$hydro_top/build-sanitize}
debian13_root=${HYDRO_DEBIAN13_ROOT:-/var/tmp/hydro-debian13}
debian13_build=${HYDRO_DEBIAN13_BUILD_DIR:-$hydro_top/build-debian13}
venv=${HYDRO_VENV:-$hydro_top/.venv}
# How scripts/ builds each tier: RelWithDebInfo with line tables only (-g1), so that backtraces and
# sanitizer reports keep their functions, files and lines, while a file that includes libtorch
# compiles in about 20% less time than with -g, its object half the size (docs/design.md).
build_type=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")

# hydro_version: the project's version, from CMakeLists.txt's project() line (where it lives);
# empty if that line has none.
hydro_version() {
  sed -n 's/^project(hydro VERSION \([0-9][0-9.]*\).*/\1/p' "$hydro_top/CMakeLists.txt"
}

# build_python BUILD: the interpreter BUILD's Python binding is for (its HYDRO_PYTHON), which
# runs the Python tests of that build; empty when BUILD has not been configured.
build_python() {
  sed -n 's/^HYDRO_PYTHON:FILEPATH=//p' "$1/CMakeCache.txt" 2>/dev/null || true
}

# point_at_build PYTHON BUILD: PYTHON finds BUILD's hydro package from any directory, and reads its
# hydro-autopause.pth (zero lines for pause under --hydro-pause=on), through a hydro-build.pth in
# its site directory. `cmake --install` or `pip install .` put both there instead.
point_at_build() {
  local site dir
  dir=$(cd "$2" && pwd) || return 1  # absolute: a relative path would follow each caller's directory
  site=$("$1" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  mkdir -p "$site"
  printf 'import site; site.addsitedir(%s)\n' "'$dir/python'" >"$site/hydro-build.pth"
  echo "$1 imports hydro from $dir/python ($site/hydro-build.pth)"
}

# build_logged DIR: builds DIR, its output added to DIR/build.log; on a failure shows the errors
# (or the log's end) and exits 1.
build_logged() {
  cmake --build "$1" -j "$(nproc)" >>"$1/build.log" 2>&1 ||
    { grep -m 20 -B2 -A6 error "$1/build.log" || tail -30 "$1/build.log"; exit 1; }
}
