#!/usr/bin/env bash
# Writes the students' copy of the course: the repository at HEAD (git archive) without the labs'
# solutions (labs/*/solution.cpp) and without the instructor guide, and prints what it left out.
# In that tree labs/CMakeLists.txt builds no lab_NN_solution target, `shardscope lab N
# --solution` says the handout has no solution, and the docs check skips the solution runs.
# Usage: scripts/make-handout.sh OUT_DIR   (OUT_DIR must be absent or empty)
set -euo pipefail
if (($# != 1)) || [[ $1 == -* ]]; then
  echo "usage: scripts/make-handout.sh OUT_DIR   (writes the student tree there)" >&2
  exit 2
fi
out=$1
root=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)

if [[ -e $out && ! -d $out ]] || [[ -d $out && -n $(ls -A "$out") ]]; then
  echo "make-handout: $out exists and is not an empty folder" >&2
  exit 2
fi
if ! commit=$(git -C "$root" rev-parse --verify -q HEAD); then
  echo "make-handout: $root is not a git work tree with a commit (the handout is HEAD)" >&2
  exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# What students must not get: each lab's solution, and the guide that says how to grade.
mapfile -t left_out < <(git -C "$root" ls-tree -r --name-only HEAD |
  grep -E '^labs/[^/]+/solution\.cpp$|^docs/instructor-guide\.md$' || true)

git -C "$root" archive --format=tar HEAD | tar -x -C "$out"
for f in "${left_out[@]}"; do rm -f "$out/$f"; done

echo "handout of $(git -C "$root" log -1 --format='%h (%s)' HEAD | cut -c1-100) written to $out"
labs=()
for d in "$out"/labs/[0-9][0-9]-*/; do [[ -d $d ]] && labs+=("$(basename "$d")"); done
echo "labs: ${labs[*]:-none}"
if ((${#left_out[@]})); then
  echo "left out:"
  printf '  %s\n' "${left_out[@]}"
else
  echo "left out: nothing (no labs/*/solution.cpp or docs/instructor-guide.md at HEAD)"
fi
for d in "${labs[@]}"; do
  # A lab graded from answers (lab 8) has answers.txt for the student's file instead.
  [[ -f $out/labs/$d/starter.cpp || -f $out/labs/$d/answers.txt ]] ||
    echo "warning: labs/$d has no starter.cpp (nor answers.txt)" >&2
done
changes=$(git -C "$root" status --porcelain --untracked-files=normal -- . ':!build' | wc -l)
if ((changes)); then
  echo "note: the handout is commit ${commit:0:12}; $changes uncommitted changes in $root are not in it"
fi
