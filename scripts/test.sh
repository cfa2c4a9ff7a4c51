#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: installs what is missing, checks the
# formatting, builds with warnings as errors, runs every ctest label, then the unit tests under
# AddressSanitizer + UBSan and the threaded tests under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

bash scripts/setup.sh
bash scripts/check-format.sh

echo "== build (default preset, warnings are errors)"
cmake --preset default -DSHARDSCOPE_WERROR=ON >/dev/null
cmake --build --preset default -j "$jobs"
echo "== tests (default preset: all labels)"
ctest --preset default -j "$jobs"

echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake --preset asan-ubsan -DSHARDSCOPE_WERROR=ON >/dev/null
cmake --build --preset asan-ubsan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --preset asan-ubsan -j "$jobs"

echo "== threaded tests under ThreadSanitizer"
cmake --preset tsan -DSHARDSCOPE_WERROR=ON >/dev/null
cmake --build --preset tsan -j "$jobs" --target threads_tests
TSAN_OPTIONS=halt_on_error=1 ctest --preset tsan -j "$jobs"
