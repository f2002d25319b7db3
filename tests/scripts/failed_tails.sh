#!/usr/bin/env bash
# scripts/failed-tails on a log as ctest --output-on-failure writes it: a failed test's last lines
# under its name, from its result line to the next test's, and nothing of a test that passed.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
{
  echo "      Start  1: Good.One"
  echo "      Start  2: Bad.Two"
  echo " 1/3 Test  #1: Good.One ....................   Passed    0.10 sec"
  echo "      Start  3: Bad.Three"
  echo " 2/3 Test  #2: Bad.Two .....................***Failed    0.20 sec"
  for i in $(seq 1 20); do echo "two says $i"; done
  echo "      Start  4: Good.Four"
  echo " 3/3 Test  #3: Bad.Three ...................***Timeout 900.05 sec"
  echo "three says 1"
  echo ""
  echo "67% tests passed, 2 tests failed out of 3"
} >"$log"
got=$("$top/scripts/failed-tails" "$log")
want="== test: Bad.Two failed; its last lines:
$(for i in $(seq 9 20); do echo "  two says $i"; done)
== test: Bad.Three failed; its last lines:
  three says 1
  "
[ "$got" = "$want" ] || { printf 'scripts/failed-tails gave:\n%s\nwanted:\n%s\n' "$got" "$want"; exit 1; }
echo "failed_tails: ok"
