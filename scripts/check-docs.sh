#!/usr/bin/env bash
# Runs every command shown in the docs against a built tree, so the docs cannot drift from the
# code. Usage: scripts/check-docs.sh [--update] [BUILD_DIR [DOC.md...]]
# (BUILD_DIR: build/default; the docs: all of them)
#
# Which blocks: the fenced blocks of README.md, docs/*.md and labs/*/README.md whose language is
# `sh` or `bash` hold commands; every other language (text, json, python, cpp ...) is not run,
# and a fence with no language is reported as a warning (mark it `text` or `sh`). A command is
# one line, or several joined by a trailing backslash or until the shell text is complete (a
# loop); a line that is only a comment is not a command.
#
# How each runs: with bash -o pipefail, in a scratch directory per doc file (commands of one file
# run in order and share it, so a dump written by one is read by the next), where
# ./build/default is a link to BUILD_DIR, ./scripts and ./tests are links to the source tree's,
# and `shardscope` / `shardscope-viz` on PATH are BUILD_DIR/apps/shardscope and
# BUILD_DIR/viz/app/shardscope-viz; each under a timeout
# (DOCS_CHECK_TIMEOUT seconds, 90 by default). A failure prints the doc's file:line, the command
# and its output, and the check exits 1.
#
# The annotations, written in the doc where a reader sees them:
#   `# exits N` in a command's comment     the command must exit N (default 0)
#   `# docs-check: skip REASON`            not run; listed as skipped with REASON
#   `<!-- docs-check: output -->`          between an sh block and the text block after it: the
#                                          text block is the stdout of the sh block's commands,
#                                          regenerated and diffed (--update rewrites it)
# and the rules that need no annotation (each printed with its reason):
#   - `bash scripts/{setup,demo,test,viz,check-docs}.sh`, `cmake ...`, `ctest ...`: skipped: the
#     test command sets up, builds and tests itself and runs this check; the check only reads a
#     built tree. Benchmarks (`bash bench/...`, `./build/default/bench/...`): skipped (minutes).
#     `bash scripts/make-handout.sh`: skipped outside a git work tree.
#   - `--backend cuda` or `--comm nccl`: passes when it exits as expected, or, on a machine
#     without enough GPUs, when it exits 2 with the one "needs N CUDA devices" / "no CUDA device"
#     line; the check says which.
#   - `mpirun ...`: run on this machine with --oversubscribe --allow-run-as-root --timeout 60 (the
#     MPI tests' flags) and without `--host LIST`; skipped when mpirun is not installed.
#   - `shardscope-viz ...`: run with --headless --screenshot (when the command has no --headless),
#     under xvfb-run when there is no display; skipped when shardscope-viz is not built.
#   - a command about lab N (`shardscope lab N`, `labs/lab_NN_*`): skipped when labs/NN-*/ is not
#     in this tree, and a solution run when labs/NN-*/solution.cpp is absent (a handout tree).
#   - in labs/*/README.md a run of the student's starter (`shardscope lab N` without --solution)
#     is skipped: it fails until the student is done; the --solution run is checked.
#     `shardscope lab N` builds the lab's target with CMake in the build tree the binary was
#     built in (its own, whatever BUILD_DIR says); DOCS_CHECK_LABS=0 skips every lab command.
set -uo pipefail
root=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)

update=0
if [[ ${1:-} == --update ]]; then
  update=1
  shift
fi
build_arg=${1:-build/default}
(($#)) && shift
only=()
for f in "$@"; do only+=("$(realpath -m --relative-to="$root" "$f")"); done
if ! build=$(cd "$build_arg" 2>/dev/null && pwd) &&
  ! build=$(cd "$root" && cd "$build_arg" 2>/dev/null && pwd); then
  echo "check-docs: no build directory $build_arg (build first: cmake --preset default && cmake --build --preset default)" >&2
  exit 2
fi
if [[ ! -x $build/apps/shardscope ]]; then
  echo "check-docs: $build/apps/shardscope is not built (cmake --build $build_arg)" >&2
  exit 2
fi
timeout_s=${DOCS_CHECK_TIMEOUT:-90}

# The numbers of an output block go down to rounding errors (a check's worst/bound) and the last
# digit of a product, and OpenBLAS picks its GEMM kernels by CPU: Haswell's on an AVX2 CPU,
# SkylakeX's or Cooperlake's on an AVX-512 one, which sum a product's terms in another order. So
# the blocks are recorded and checked with OpenBLAS's Haswell kernels wherever the CPU runs them
# (AVX2 and FMA), whatever it would pick (OPENBLAS_CORETYPE, unless the caller set it). On a CPU
# without them OpenBLAS picks, and a block may differ in its last digits (said in the summary).
# shardscope's own f32 and f64 loops are element-wise or sum in the source's order (no
# -ffast-math), so whether they were built for x86-64-v3 or v4 (-march=native on such a CPU; FMA
# in both) does not change their bits either.
blas_note=""
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  if grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo 2>/dev/null; then
    export OPENBLAS_CORETYPE=Haswell
    blas_note="OpenBLAS's Haswell kernels (OPENBLAS_CORETYPE=Haswell)"
  else
    blas_note="OpenBLAS's own choice of kernels: this CPU has no AVX2 and FMA, so an output block may differ in its last digits"
  fi
else
  blas_note="OpenBLAS kernels OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (set by the caller)"
fi
viz_bin=$build/viz/app/shardscope-viz

scratch=$(mktemp -d "${TMPDIR:-/tmp}/shardscope-docs.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/bin"
ln -s "$build/apps/shardscope" "$scratch/bin/shardscope"
[[ -x $viz_bin ]] && ln -s "$viz_bin" "$scratch/bin/shardscope-viz"

cd "$root" || exit 2
shopt -s nullglob
docs=(README.md docs/*.md labs/*/README.md)
shopt -u nullglob
((${#only[@]})) && docs=("${only[@]}")

# ---- parsing: every doc into commands and output blocks ------------------------------------
cmd_file=() cmd_line=() cmd_text=() cmd_block=()
out_file=() out_start=() out_end=() out_block=() out_text=()
parse_errors=() warnings=() not_run=()
block_id=0

# True when the shell text is complete (no open quote, loop or continuation).
complete() { bash -n -c "$1" 2>/dev/null; }

parse_file() {
  local file=$1 n=0 line fence="" lang="" in_sh=0 in_out=0 acc="" acc_line=0
  local marker=0 marker_line=0 last_sh=-1 start=0 text="" stripped
  local -A skipped_langs=()
  while IFS= read -r line || [[ -n $line ]]; do
    n=$((n + 1))
    if [[ -z $fence ]]; then
      if [[ $line =~ ^[[:space:]]*(\`\`\`+)[[:space:]]*([A-Za-z0-9_+-]*) ]]; then
        fence=${BASH_REMATCH[1]} lang=${BASH_REMATCH[2]} start=$n text="" in_sh=0 in_out=0
        block_id=$((block_id + 1))
        if ((marker)); then
          in_out=1 marker=0
          [[ $lang == text ]] || parse_errors+=("$file:$n: the block after <!-- docs-check: output --> must be \`\`\`text (it is '${lang:-none}')")
        elif [[ $lang == sh || $lang == bash ]]; then
          in_sh=1 last_sh=$block_id
        elif [[ -z $lang ]]; then
          warnings+=("$file:$n: a fence without a language is not run; mark it \`\`\`text (not commands) or \`\`\`sh (commands)")
        else
          skipped_langs[$lang]=$((${skipped_langs[$lang]:-0} + 1))
        fi
      elif [[ $line =~ ^[[:space:]]*\<\!--[[:space:]]*docs-check:[[:space:]]*output[[:space:]]*--\> ]]; then
        marker=1 marker_line=$n
        ((last_sh >= 0)) || parse_errors+=("$file:$n: <!-- docs-check: output --> with no sh block before it")
      elif ((marker)) && [[ -n ${line//[[:space:]]/} ]]; then
        parse_errors+=("$file:$marker_line: <!-- docs-check: output --> must be followed by a \`\`\`text block")
        marker=0
      else
        # prose: the last sh block stays the one an output marker refers to only until prose
        [[ -n ${line//[[:space:]]/} ]] && last_sh=-1
      fi
      continue
    fi
    if [[ $line =~ ^[[:space:]]*(\`\`\`+)[[:space:]]*$ && ${#BASH_REMATCH[1]} -ge ${#fence} ]]; then
      if ((in_sh)) && [[ -n $acc ]]; then
        parse_errors+=("$file:$acc_line: the command is not complete shell text: $(bash -n -c "$acc" 2>&1 | head -1)")
        acc=""
      fi
      if ((in_out)); then
        out_file+=("$file") out_start+=("$start") out_end+=("$n") out_text+=("$text")
        out_block+=("$last_sh")
        last_sh=-1
      fi
      fence="" in_sh=0 in_out=0
      continue
    fi
    if ((in_out)); then
      text+=$line$'\n'
    elif ((in_sh)); then
      stripped=${line#"${line%%[![:space:]]*}"}
      if [[ -z $acc ]]; then
        [[ -z $stripped || $stripped == \#* ]] && continue
        acc=$line acc_line=$n
      else
        acc+=$'\n'$line
      fi
      [[ $line =~ \\$ ]] && continue
      complete "$acc" || continue
      cmd_file+=("$file") cmd_line+=("$acc_line") cmd_text+=("$acc") cmd_block+=("$block_id")
      acc=""
    fi
  done <"$file"
  [[ -n $fence ]] && parse_errors+=("$file:$start: the fence is never closed")
  local k list=""
  for k in "${!skipped_langs[@]}"; do list+="${list:+, }${skipped_langs[$k]} $k"; done
  [[ -n $list ]] && not_run+=("$file: not commands, not run: $list")
  return 0
}

for doc in "${docs[@]}"; do parse_file "$doc"; done

# ---- classification: skip, or run (and how) -------------------------------------------------
# Sets: action (run|skip), reason, run_text, expect, gpu, note.
gpu_line='needs [0-9]+ CUDA devices?|no CUDA device'
nl=$'\n'
skip_re="#[^$nl]*docs-check:[[:space:]]*skip[[:space:]]*([^$nl]*)"
exits_re="#[^$nl]*exits[[:space:]]+([0-9]+)"

strip_comments() { sed -E "s/[[:space:]]+#[^'\"]*$//" <<<"$1"; }

lab_dir() { # lab_dir N: labs/NN-* or nothing
  local d
  for d in labs/"$(printf %02d "$((10#$1))")"-*/; do [[ -d $d ]] && echo "${d%/}"; done
}

classify() {
  local file=$1 c=$2 first
  action=run reason="" run_text=$c expect=0 gpu=0 note=""
  # the command as a rule sees it: one line, no comments, no leading VAR=value assignments
  first=$(strip_comments "$c" | tr '\n' ' ' | sed -E 's/^[[:space:]]*([A-Za-z_][A-Za-z0-9_]*=[^[:space:]]*[[:space:]]+)*//')
  if [[ $c =~ $skip_re ]]; then
    action=skip reason=${BASH_REMATCH[1]:-marked skip}
    return
  fi
  if [[ $c =~ $exits_re ]]; then expect=${BASH_REMATCH[1]}; fi
  case $first in
    "bash scripts/check-docs.sh"*)
      action=skip reason="the docs check itself"
      return ;;
    "bash scripts/setup.sh"* | "bash scripts/demo.sh"* | "bash scripts/test.sh"* | "bash scripts/viz.sh"*)
      action=skip reason="a set-up/build/test script: the test command runs set-up and the build itself and is not re-run from inside it"
      return ;;
    "bash scripts/make-handout.sh"*)
      if ! git -C "$root" rev-parse --verify -q HEAD >/dev/null 2>&1; then
        action=skip reason="not a git work tree with a commit (the handout is made from HEAD)"
        return
      fi ;;
    cmake\ * | ctest\ *)
      action=skip reason="builds or tests a build tree: the test command does that itself; this check only reads a built tree"
      return ;;
    "bash bench/"* | ./build/default/bench/* | build/default/bench/*)
      action=skip reason="a benchmark (minutes of CPU): docs/benchmarks.md records what it measured"
      return ;;
  esac
  if [[ $file == labs/*/README.md && ($first =~ shardscope\ lab\ [0-9] || $first == *labs/lab_*) &&
    $first != *--solution* && $first != *_solution* ]]; then
    action=skip reason="a lab README's run of the student's starter: it fails until the lab is done (its --solution run is checked)"
    return
  fi
  local num="" dir solution=0
  if [[ $first =~ shardscope\ lab\ ([0-9]+) ]]; then
    num=${BASH_REMATCH[1]}
    [[ $first == *--solution* ]] && solution=1
  elif [[ $first =~ labs/lab_([0-9]+)_(starter|solution) ]]; then
    num=${BASH_REMATCH[1]}
    [[ ${BASH_REMATCH[2]} == solution ]] && solution=1
  fi
  if [[ -n $num ]]; then
    if [[ ${DOCS_CHECK_LABS:-1} == 0 ]]; then
      action=skip reason="lab $((10#$num)): DOCS_CHECK_LABS=0"
      return
    fi
    dir=$(lab_dir "$num")
    if [[ -z $dir ]]; then
      action=skip reason="lab $num: labs/$(printf %02d "$((10#$num))")-*/ is not in this tree"
      return
    fi
    if ((solution)) && [[ ! -f $dir/solution.cpp ]]; then
      action=skip reason="lab $num: $dir/solution.cpp is absent (a handout tree)"
      return
    fi
  fi
  if [[ $first == mpirun\ * ]]; then
    if ! command -v mpirun >/dev/null; then
      action=skip reason="mpirun is not installed"
      return
    fi
    local flags="" f
    for f in --oversubscribe --allow-run-as-root; do [[ $first == *"$f"* ]] || flags+=" $f"; done
    [[ $first == *--timeout* ]] || flags+=" --timeout 60"
    run_text=$(strip_comments "$c" | sed -E "1s/^mpirun/mpirun$flags/; s/[[:space:]]--host[[:space:]]+[^[:space:]]+//")
    note="mpirun here:${flags:- as written}"
    [[ $first == *--host* ]] && note+=", without --host"
  fi
  if [[ $first == *shardscope-viz* ]]; then
    if [[ ! -x $viz_bin ]]; then
      action=skip reason="shardscope-viz is not built in $build_arg (SHARDSCOPE_VIZ)"
      return
    fi
    run_text=$(strip_comments "$run_text")
    if [[ $first != *--headless* && $first != *--bench-frames* ]]; then
      run_text=$(sed -E '1s#(shardscope-viz)([[:space:]]|$)#\1 --headless --screenshot docs-check-viz.png\2#' <<<"$run_text")
      note="headless, --screenshot"
    fi
    if [[ -z ${DISPLAY:-} ]]; then
      if ! command -v xvfb-run >/dev/null; then
        action=skip reason="no display and no xvfb-run"
        return
      fi
      run_text="xvfb-run -a $run_text"
      note+="${note:+, }under xvfb-run"
    fi
  fi
  if [[ $first == *"--backend cuda"* || $first == *"--comm nccl"* ]]; then gpu=1; fi
}

# ---- running ---------------------------------------------------------------------------------
n_ok=0 n_fail=0 n_skip=0 n_out_ok=0 n_out_fail=0 n_out_skip=0
failures=()
started=$(date +%s%N)

summary_of() { # the first line of a command, shortened
  local s=${1%%$'\n'*}
  s=$(sed -E 's/^[[:space:]]+//' <<<"$s")
  ((${#s} > 96)) && s=${s:0:93}...
  printf '%s' "$s"
}

show_output() { # show_output FILE LABEL
  [[ -s $1 ]] || return 0
  echo "    --- $2 (last 40 lines):"
  tail -n 40 "$1" | sed 's/^/    | /'
}

declare -A block_out=() block_skipped=() block_failed=()
last_file=""
workdir=""
for i in "${!cmd_text[@]}"; do
  file=${cmd_file[$i]} line=${cmd_line[$i]} c=${cmd_text[$i]} block=${cmd_block[$i]}
  if [[ $file != "$last_file" ]]; then
    last_file=$file
    workdir=$scratch/work-$i
    mkdir -p "$workdir/build"
    ln -s "$build" "$workdir/build/default"
    ln -s "$root/scripts" "$workdir/scripts"
    ln -s "$root/tests" "$workdir/tests"  # the committed fixtures, e.g. tests/fixtures/torch/
    echo "== $file"
  fi
  classify "$file" "$c"
  where="$file:$line"
  if [[ $action == skip ]]; then
    n_skip=$((n_skip + 1))
    block_skipped[$block]=1
    printf '  skip  %-28s %s\n        (%s)\n' "$where" "$(summary_of "$c")" "$reason"
    continue
  fi
  out=$scratch/out-$i err=$scratch/err-$i
  t0=$(date +%s%N)
  (cd "$workdir" && PATH="$scratch/bin:$PATH" timeout -k 5 "$timeout_s" \
    bash -o pipefail -c "$run_text") >"$out" 2>"$err" </dev/null
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  cat "$out" >>"$scratch/block-$block"
  block_out[$block]=1
  verdict=fail why=""
  if ((rc == 124 || rc == 137)); then
    why="timed out after ${timeout_s}s"
  elif ((rc == expect)); then
    verdict=ok
  elif ((gpu)) && ((rc == 2)) && grep -Eq "$gpu_line" "$out" "$err"; then
    verdict=ok
    note+="${note:+; }no GPU here: checked the refusal (exit 2: $(grep -Eoh "$gpu_line" "$out" "$err" | head -1))"
  else
    why="exit $rc, expected $expect"
    ((gpu)) && why+=" (or exit 2 with a \"needs N CUDA devices\" line without GPUs)"
  fi
  if [[ $verdict == ok ]]; then
    n_ok=$((n_ok + 1))
    printf '  ok    %-28s %5ss  %s\n' "$where" "$secs" "$(summary_of "$c")"
    [[ -n $note ]] && printf '        (%s)\n' "$note"
    [[ $expect != 0 ]] && printf '        (exits %s, as the doc says)\n' "$expect"
  else
    n_fail=$((n_fail + 1))
    block_failed[$block]=1
    failures+=("$where: $why")
    echo "  FAIL  $where: $why"
    echo "    \$ ${run_text//$'\n'/$'\n'    }"
    show_output "$out" stdout
    show_output "$err" stderr
  fi
done

# ---- generated output blocks ------------------------------------------------------------------
declare -A rewrites=()
for j in "${!out_text[@]}"; do
  file=${out_file[$j]} start=${out_start[$j]} end=${out_end[$j]} block=${out_block[$j]}
  where="$file:$start"
  actual=$scratch/block-$block
  if [[ -n ${block_skipped[$block]:-} || -z ${block_out[$block]:-} ]]; then
    n_out_skip=$((n_out_skip + 1))
    printf '  skip  %-28s the output block (its commands were skipped)\n' "$where"
    continue
  fi
  printf '%s' "${out_text[$j]}" >"$scratch/expected-$j"
  if cmp -s "$scratch/expected-$j" "$actual"; then
    n_out_ok=$((n_out_ok + 1))
    printf '  ok    %-28s the output block equals the commands'"'"' output\n' "$where"
  elif ((update)) && [[ -z ${block_failed[$block]:-} ]]; then
    n_out_ok=$((n_out_ok + 1))
    rewrites[$file]+="$start $end $actual"$'\n'
    printf '  new   %-28s the output block is rewritten from the commands'"'"' output\n' "$where"
  else
    n_out_fail=$((n_out_fail + 1))
    failures+=("$where: the output block differs from the commands' output")
    echo "  FAIL  $where: the output block differs from what its commands print now (- doc, + now;"
    echo "        scripts/check-docs.sh --update rewrites it):"
    diff -u "$scratch/expected-$j" "$actual" | tail -n +3 | sed 's/^/    /'
  fi
done

# --update: splice the new outputs in, last block first so line numbers stay valid.
for file in "${!rewrites[@]}"; do
  while read -r start end actual; do
    [[ -n $start ]] || continue
    { head -n "$start" "$file"; cat "$actual"; tail -n +"$end" "$file"; } >"$scratch/rewrite"
    cp "$scratch/rewrite" "$file"
  done < <(sort -k1,1nr <<<"${rewrites[$file]}")
done

# ---- summary ---------------------------------------------------------------------------------
secs=$(awk -v a="$started" -v b="$(date +%s%N)" 'BEGIN { printf "%.0f", (b - a) / 1e9 }')
for w in "${not_run[@]}"; do echo "  ($w)"; done
for w in "${warnings[@]}"; do echo "  WARNING $w"; done
for e in "${parse_errors[@]}"; do echo "  FAIL  $e"; done
echo "docs check: ${#docs[@]} files; $((n_ok + n_fail)) commands run ($n_ok ok, $n_fail failed)," \
  "$n_skip skipped with their reasons, $((n_out_ok + n_out_fail)) output blocks compared" \
  "($n_out_fail differ, $n_out_skip skipped), ${#warnings[@]} warnings, ${#parse_errors[@]} parse errors, in ${secs}s"
echo "  (products with $blas_note)"
if ((n_fail + n_out_fail + ${#parse_errors[@]} > 0)); then
  for f in "${failures[@]}"; do echo "  failed: $f"; done
  exit 1
fi
