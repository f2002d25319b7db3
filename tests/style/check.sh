#!/usr/bin/env bash
# The tree's shape, as a test: every tracked C++ file follows .clang-format, no source file is
# over 400 lines, and no function over 60 (a longer one says why in the comment above it, with
# "over the 60"), and no shell script pipes into grep -q. Needs clang-format and universal-ctags (scripts/setup installs both).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
fail=0
command -v clang-format >/dev/null || { echo "style: clang-format is not installed" >&2; exit 1; }
command -v ctags >/dev/null || { echo "style: ctags (universal-ctags) is not installed" >&2; exit 1; }

mapfile -t cxx < <(git ls-files '*.cpp' '*.h')
if ! clang-format --dry-run --Werror "${cxx[@]}" 2>/tmp/hydro-style.$$; then
  grep -E 'warning:|error:' /tmp/hydro-style.$$ | head -20 >&2 || true
  echo "style: the files above do not follow .clang-format (run: clang-format -i FILE)" >&2
  fail=1
fi
rm -f /tmp/hydro-style.$$

while read -r n f; do
  [ "$f" = total ] && continue
  [ "$n" -le 400 ] || { echo "style: $f has $n lines (at most 400)" >&2; fail=1; }
done < <(git ls-files '*.cpp' '*.h' '*.py' | xargs wc -l)

long=$({
  printf '%s\n' "${cxx[@]}" | ctags -L - --fields=+ne --c++-kinds=f --output-format=json -f - 2>/dev/null |
  /usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    t = json.loads(line)
    if t.get("kind") != "function" or "end" not in t:
        continue
    n = t["end"] - t["line"] + 1
    if n <= 60:
        continue
    above = open(t["path"]).read().splitlines()[max(0, t["line"] - 6):t["line"] - 1]
    if not any("over the 60" in l for l in above):
        print("%s:%d: %s has %d lines (at most 60)" % (t["path"], t["line"], t["name"], n))
'
  git ls-files '*.py' | /usr/bin/python3 -c '
import ast, sys
for path in sys.stdin.read().split():
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
            print(f"{path}:{node.lineno}: {node.name} has {node.end_lineno - node.lineno + 1} lines (at most 60)")
'
})
# A shell script under pipefail fails when grep -q stops reading a pipe early (SIGPIPE upstream).
early=$(git ls-files '*.sh' 'scripts/*' '.ci/*' | xargs grep -nE '(^|[^|])\|[[:space:]]*grep[[:space:]]+-[a-zA-Z]*q' /dev/null || true)
if [ -n "$early" ]; then
  echo "$early" >&2
  echo "style: the lines above pipe into grep -q; read the output whole first (grep -q PAT <<<\"\$(cmd)\")" >&2
  fail=1
fi
if [ -n "$long" ]; then
  echo "$long" >&2
  fail=1
fi
[ "$fail" = 0 ] && echo "style: every C++ file formatted, no file over 400 lines, no function over 60, no pipe into grep -q"
exit "$fail"
