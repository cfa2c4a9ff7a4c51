#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: installs what is missing, checks the
# formatting, runs the threaded tests under ThreadSanitizer and the unit tests under
# AddressSanitizer + UBSan, fuzzes every reader of outside input for a minute (scripts/fuzz.sh),
# then builds the default preset with warnings as errors, runs every ctest label (unit, threads,
# e2e, mpi, viz, gpu, lab), builds the GPU bundle (scripts/gpu-bundle.sh: Release, CUDA sm_90) and
# runs it from its folder with the system's copies of its libraries hidden
# (scripts/test-gpu-bundle.sh), and runs every command the docs show against the default build
# (scripts/check-docs.sh). The sanitizer runs leave out label mpi: LeakSanitizer reports
# Open MPI's own allocations. Its last line is the docs check's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

bash scripts/setup.sh
bash scripts/check-format.sh

echo "== threaded tests under ThreadSanitizer"
cmake --preset tsan -DSHARDSCOPE_WERROR=ON >/dev/null
cmake --build --preset tsan -j "$jobs" --target threads_tests viz_tests
TSAN_OPTIONS=halt_on_error=1 ctest --preset tsan -j "$jobs"

echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake --preset asan-ubsan -DSHARDSCOPE_WERROR=ON >/dev/null
cmake --build --preset asan-ubsan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --preset asan-ubsan -j "$jobs"

echo "== libFuzzer targets (clang, ASan + UBSan), 12 s each over their seed corpora"
bash scripts/fuzz.sh 12

echo "== build (default preset, warnings are errors) and every test"
cmake --preset default -DSHARDSCOPE_WERROR=ON >/dev/null
cmake --build --preset default -j "$jobs"
ctest --preset default -j "$jobs"

echo "== GPU bundle: build, then run from its folder"
bash scripts/gpu-bundle.sh build/gpu-bundle
bash scripts/test-gpu-bundle.sh build/gpu-bundle

echo "== every command in the docs, against that build"
bash scripts/check-docs.sh build/default
