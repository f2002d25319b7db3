# Sourced by scripts/test --changed: which tests answer for a change, in a few minutes, before CI.
#
# changed_files BASE: the files that differ from commit BASE: committed since, staged, unstaged and
# untracked (git's own ignores apply).
changed_files() {
  { git -C "$hydro_top" diff --name-only "$1" -- && git -C "$hydro_top" ls-files --others --exclude-standard; } | sort -u
}

# The Slurm tests of CI that take the common path on a real Slurm: the C++ program suspended,
# resumed and requeued (the demo's), and the Python program's requeue with two ranks.
changed_smoke='slurm\.suspend_requeue\.cgroup|slurm\.lightning\.requeue\.cgroup\.n2'

# tests_running TIER_DIR SCRIPT: the names of the tests that are not long whose command runs
# SCRIPT (tests/integration/X.sh), from ctest's own list.
tests_running() {
  (cd "$1" && ctest -N -V -LE '^(long|gpu)$' 2>/dev/null) |
    awk -v s="/$2 " '/ Test command: / { cmd = $0 " " } / Test +#[0-9]+: / && index(cmd, s) { print $3; cmd = "" }'
}

# changed_selections BASE: one line per ctest run the change needs, "TIER CTEST_ARGS...", for
# scripts/test to run one after another. The core, the config reader, the plugin, hydro-launch,
# hydroctl and the store: the sanitize tier's units and the Slurm smoke tests; the torch layer,
# the examples and the build: the main tier's torch units and the smoke tests; the CUDA layers:
# their units; a unit test: both tiers' units; the binding's C and C++ (python/*.cpp, *.h, *.c):
# the torch units and the Python tests of what each file binds (the binding's basic tests and the
# fork guard's for the rest); autopause's start-up hook: its tests; a Python module: its own test
# file (tests/python/test_NAME.py) and the binding's basic ones; a test file or script: its tests;
# Slurm's scripts and the integration tests' helpers: the option test on both proctrack plugins and
# the moved multi-host test (figures.sh: the smoke tests, which report figures); the install
# tests, bench/ and the scripts' own tests: their tests; the packaging and the admin's config
# (debian/, etc/, rpm/, scripts/package): the oldest tier's package tests. The style check always.
changed_selections() {
  local f regex=() sanitize= torch= packages=()
  while read -r f; do
    case "$f" in
      runtime/core/* | runtime/include/* | runtime/store/* | config/* | spank/* | launcher/* | ctl/*)
        sanitize=1 regex+=("$changed_smoke") ;;
      runtime/torch/* | examples/* | tests/torch/* | cmake/* | CMakeLists.txt | runtime/CMakeLists.txt | \
        tests/CMakeLists.txt) torch=1 regex+=("$changed_smoke") ;;
      runtime/cuda/* | runtime/cuda_checkpoint/*) regex+=('cuda\..*' 'CudaCheckpointHelper\..*' 'Vmm.*') ;;
      tests/unit/*) sanitize=1 torch=1 ;;
      python/data.cpp) torch=1 regex+=('python\.test_(sampler|sharded_dataset|dataloader|watchdog)') ;;
      python/checkpoint_dir.cpp) torch=1 regex+=('python\.test_(dcp_storage|shard_file)') ;;
      python/tensor_copies.cpp) torch=1 regex+=('python\.test_(copy_behind|device_resume|pause)') ;;
      python/*.cpp | python/*.h | python/*.c | python/CMakeLists.txt)
        torch=1 regex+=('python\.test_(runtime|pause|job|fork_guard)') ;;
      python/_hydro_autopause.py | python/hydro-autopause.pth)
        regex+=('python\.test_autopause' 'slurm\.python\.(autopause|early_pause)\.cgroup') ;;
      python/hydro/*.py)
        f=$(basename "$f" .py); f=${f#_}
        regex+=('python\.test_(runtime|pause|job)')
        [ ! -f "$hydro_top/tests/python/test_$f.py" ] || regex+=("python\.test_$f") ;;
      tests/python/test_*.py) regex+=("python\.$(basename "$f" .py)") ;;
      tests/python/*) regex+=('python\.test_.*') ;;
      tests/integration/lib.sh | tests/integration/show_waits.sh | tests/integration/own_host.sh | \
        scripts/slurm-local | scripts/slurm-nodes.sh | scripts/cgroups.sh | scripts/paths.sh)
        regex+=('slurm\.option\.(cgroup|linuxproc)' 'multinode\.moved\.cgroup') ;;
      tests/integration/figures.sh) regex+=("$changed_smoke") ;;
      tests/integration/kill_in_save.cpp) regex+=('slurm\.multi_rank_checkpoint\.cgroup') ;;
      tests/install/*) regex+=('install\..*') ;;
      bench/*) regex+=('bench\..*') ;;
      tests/scripts/* | scripts/failed-tails) regex+=('scripts\..*') ;;
      tests/integration/*.sh) regex+=($(tests_running "$build" "$(basename "$f")" | sed 's/\./\\./g')) ;;
      tests/fuzz/*) sanitize=1 ;;
      debian/* | etc/* | tests/package/install.sh | tests/package/package_lib.sh) packages+=(install) ;;
      rpm/* | tests/package/rpm.sh) packages+=(rpm) ;;
      scripts/package) packages+=(install rpm) ;;
    esac
  done < <(changed_files "$1")
  echo "main -R ^style\\.check\$"
  [ -z "$sanitize" ] || echo "sanitize -L ^unit\$"
  [ -z "$torch" ] || echo "main -L ^torch\$"
  [ ${#regex[@]} = 0 ] || echo "main -R ^($(printf '%s\n' "${regex[@]}" | sort -u | paste -sd'|'))\$"
  [ ${#packages[@]} = 0 ] || echo "oldest -R ^package\\.($(printf '%s\n' "${packages[@]}" | sort -u | paste -sd'|'))\$"
}
