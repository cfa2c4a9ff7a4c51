#!/usr/bin/env bash
# Fails when a C++ file of the tree (tracked, or new and not ignored) differs from the output of
# clang-format (.clang-format at the root).
# With --fix, rewrites the files instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.h' '*.hpp' '*.cpp' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/shardscope-format.log; then
  head -40 /tmp/shardscope-format.log >&2
  echo "format: files differ from clang-format; run: bash scripts/check-format.sh --fix" >&2
  exit 1
fi
echo "format: ${#files[@]} files clean"
