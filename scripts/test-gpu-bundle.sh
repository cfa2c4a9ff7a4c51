#!/usr/bin/env bash
# Proves that a GPU bundle (scripts/gpu-bundle.sh) runs from its folder on this machine, with the
# system's copies of the libraries it carries hidden from the loader:
#   bash scripts/test-gpu-bundle.sh DIR
# 1. layout and size: bin/, lib/, env.sh, run, gpu-check.sh, MANIFEST, bundle.env; under 60 MiB.
# 2. the loader's view: with `env -i` and LD_LIBRARY_PATH=DIR/lib:DIR/lib/gcc-runtime only, ldd of
#    every program and library in DIR resolves every library outside glibc, the driver and the
#    CUDA libraries the GPU machine provides (bundle.env) inside DIR; a failure names the file, the
#    library and where it resolved. Then the same check on a copy of DIR without
#    lib/libopenblas*, which must fail naming libopenblas.so.0 (the check can fail).
# 3. in a private mount namespace (unshare -m; without one the step says what is missing and runs
#    with the system copies visible), /dev/null bound over every system copy of a library DIR
#    carries, each run from DIR through `env -i ... DIR/run`:
#    - shardscope run on the CPU: single, and tp, tp-sp, ulysses at degree 2, reference check
#      passed;
#    - the gpu-labelled tests (gpu-check's filters): every one skipped, naming the missing device
#      ("needs N CUDA device(s)" / "no CUDA device"), none passed, none failed;
#    - layer_bench and backend_bandwidth briefly on the CPU, and on cuda exit 2 naming the device;
#    - DIR/gpu-check.sh: exit 2 with one line saying no GPU was found;
#    - DIR/gpu-check.sh --rehearsal (every step on the CPU backend, small): results.json holds
#      every step, its path is the last line, and every step that needs neither a GPU,
#      compute-sanitizer nor PyTorch passed.
# Exit 0 when all of that holds; 1 with every failure named.
set -uo pipefail
root=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
inside="" # the second half's mode: "hide" (in a private mount namespace) or "visible"
if [[ ${1:-} == --inside=* ]]; then
  inside=${1#--inside=}
  shift
fi
if (($# != 1)) || [[ ! -d $1 ]]; then
  echo "usage: bash scripts/test-gpu-bundle.sh DIR (a folder made by scripts/gpu-bundle.sh)" >&2
  exit 2
fi
dir=$(cd "$1" && pwd)
failures=0
fail() {
  echo "  FAIL  $*"
  failures=$((failures + 1))
}
ok() { echo "  ok    $*"; }

system_re='^(ld-linux[-a-z0-9_]*|linux-vdso|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libBrokenLocale|libthread_db|libnss_[a-z]+)\.so'
driver_re='^(libcuda|libnvidia-[-a-z0-9_]+)\.so'

# check_resolution BUNDLE: every library of every file in BUNDLE resolves inside it, or is
# glibc's, the driver's, or one the GPU machine provides. Prints each problem; 1 when any.
check_resolution() {
  local b=$1 f name arrow path rest bad=0 provided
  provided=$(. "$b/bundle.env" && echo " $SHARDSCOPE_BUNDLE_EXTERNAL ")
  while IFS= read -r f; do
    while read -r name arrow path rest; do
      [[ $arrow == "=>" ]] || continue
      [[ $name =~ $system_re || $name =~ $driver_re || $provided == *" $name "* ]] && continue
      if [[ $path == not ]]; then
        echo "  ${f#"$b"/} needs $name: not found"
        bad=1
      elif [[ $(readlink -f "$path") != "$b"/* ]]; then
        echo "  ${f#"$b"/} needs $name: it resolves to $path, outside $b"
        bad=1
      fi
    done < <(env -i LD_LIBRARY_PATH="$b/lib:$b/lib/gcc-runtime" ldd "$f" 2>&1)
  done < <(find "$b/bin" "$b/lib" -type f | sort)
  return "$bad"
}

# run_bundled TIMEOUT PROGRAM ARGS...: a program of the bundle through DIR/run, environment cleared
run_bundled() {
  local limit=$1
  shift
  env -i PATH=/usr/bin:/bin HOME="${HOME:-/root}" timeout -k 5 "$limit" "$dir/run" "$@"
}

# ---- 1 and 2: outside the namespace -----------------------------------------------------------
if [[ -z $inside ]]; then
  echo "== GPU bundle $dir: layout, size, libraries"
  for f in bin lib env.sh run gpu-check.sh gpu_check.py MANIFEST bundle.env; do
    [[ -e $dir/$f ]] || fail "$dir/$f is missing"
  done
  bytes=$(du -sb "$dir" | cut -f1)
  if ((bytes < 60 * 1024 * 1024)); then
    ok "size $bytes bytes ($((bytes / 1048576)) MiB), under 60 MiB"
  else
    fail "size $bytes bytes, over 60 MiB"
  fi
  if problems=$(check_resolution "$dir"); then
    ok "ldd: every library of $(find "$dir/bin" "$dir/lib" -type f | wc -l) files resolves inside the bundle (or is glibc's, the driver's, or $(. "$dir/bundle.env" && echo "$SHARDSCOPE_BUNDLE_EXTERNAL"))"
  else
    fail "ldd: libraries resolve outside the bundle:"
    echo "$problems"
  fi
  found=$(env -i PATH=/usr/bin:/bin bash -c '. "$1/env.sh" && echo "$SHARDSCOPE_BUNDLE_FOUND"' _ "$dir")
  if [[ $found == *gcc-runtime=system* && $found != *=missing* ]]; then
    ok "env.sh here: $found (this machine's libstdc++ has every version the bundle needs)"
  else
    fail "env.sh here: expected every library found and gcc-runtime=system, got: $found"
  fi
  broken=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle-broken.XXXXXX")
  cp -a "$dir/." "$broken/"
  rm -f "$broken"/lib/libopenblas*
  if problems=$(check_resolution "$broken"); then
    fail "ldd: a copy without lib/libopenblas* passed the check"
  elif grep -q "needs libopenblas.so.0" <<<"$problems"; then
    ok "ldd: a copy without lib/libopenblas* fails, naming it: $(grep -m1 libopenblas <<<"$problems" | sed 's/^ *//')"
  else
    fail "ldd: a copy without lib/libopenblas* failed without naming it: $problems"
  fi
  rm -rf "$broken"

  echo "== GPU bundle: runs from $dir with the system copies of its libraries hidden"
  if err=$(unshare -m --propagation private mount --bind /dev/null /dev/null 2>&1); then
    unshare -m --propagation private bash "$0" --inside=hide "$dir" || failures=$((failures + 1))
  else
    echo "  skip  hiding the system copies: unshare -m and a bind mount are not allowed here" \
      "($err); the runs below see them"
    bash "$0" --inside=visible "$dir" || failures=$((failures + 1))
  fi
  if ((failures)); then
    echo "test-gpu-bundle: FAILED ($failures)"
    exit 1
  fi
  echo "test-gpu-bundle: passed"
  exit 0
fi

# ---- 3: inside the namespace ------------------------------------------------------------------
# The system copies of each library the bundle carries: the loader cache's, the usual folders',
# and the build tree's copies of ours; /dev/null goes over each real file.
hidden=()
if [[ $inside == hide ]]; then
  # The names: every library the bundle carries, and every other one its files load that is not
  # glibc's, the driver's or provided by the GPU machine (a library missing from lib/ then fails
  # to load here too, instead of coming from the system).
  provided=$(. "$dir/bundle.env" && echo " $SHARDSCOPE_BUNDLE_EXTERNAL ")
  names=$(
    find "$dir/lib" -type f -printf '%f\n'
    find "$dir/bin" "$dir/lib" -type f -exec env -i ldd {} \; 2>/dev/null |
      awk '$2 == "=>" { print $1 }' | while read -r name; do
        [[ $name =~ $system_re || $name =~ $driver_re || $provided == *" $name "* ]] || echo "$name"
      done
  )
  declare -A seen=()
  copies=$(mktemp)
  while IFS= read -r name; do
    {
      ldconfig -p | awk -v n="$name" '$1 == n { print $NF }'
      for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /usr/local/lib \
        /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
        [[ -e $d/$name ]] && echo "$d/$name"
      done
      [[ $name == libshardscope_* ]] && find "$root/build" -name "$name*" -not -path "$dir/*"
    } 2>/dev/null | while IFS= read -r copy; do readlink -f "$copy"; done >"$copies"
    while IFS= read -r real; do
      [[ -n $real && -z ${seen[$real]:-} && $real != "$dir"/* ]] || continue
      seen[$real]=1
      if mount --bind /dev/null "$real"; then hidden+=("$real"); else fail "cannot hide $real"; fi
    done <"$copies"
  done < <(sort -u <<<"$names")
  rm -f "$copies"
  for real in "${hidden[@]}"; do
    [[ $(head -c 4 "$real" | wc -c) == 0 ]] || fail "$real is still readable after hiding it"
  done
  ok "hid ${#hidden[@]} system copies under /dev/null: ${hidden[*]}"
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle-test.XXXXXX")

for spec in "single 1" "tp 2" "tp-sp 2" "ulysses 2"; do
  read -r mode degree <<<"$spec"
  what="shardscope run --mode $mode --degree $degree (CPU)"
  log=$out/run-$mode.log
  run_bundled 120 shardscope run --mode "$mode" --degree "$degree" --seq 32 --batch 2 \
    --hidden 64 --heads 4 --steps 2 --seed 1 >"$log" 2>&1
  rc=$?
  if ((rc != 0)); then
    fail "$what: exit $rc: $(tail -3 "$log" | tr '\n' ' ')"
  elif [[ $mode != single ]] && ! grep -q '^check passed' "$log"; then
    fail "$what: no 'check passed' line"
  else
    ok "$what: exit 0$([[ $mode != single ]] && echo ', reference check passed')"
  fi
done

# The gpu-labelled tests: all skipped naming the device (a test about the refusal itself,
# *TooFewDevices*, may pass), none failed.
for spec in "autograd_tests */cuda:*/*_cuda" "parallel_tests */cuda:*/*_cuda" "cuda_tests *" \
  "nccl_tests *"; do
  read -r binary filter <<<"$spec"
  run_bundled 120 "$binary" --gtest_filter="$filter" --gtest_output=json:"$out/$binary.json" \
    >"$out/$binary.log" 2>&1
  rc=$?
  verdict=$(python3 - "$out/$binary.json" "$out/$binary.log" "$rc" <<'PY'
import json, re, sys
log, rc = open(sys.argv[2]).read(), int(sys.argv[3])
try:
    data = json.load(open(sys.argv[1]))
except OSError:
    sys.exit(print(f"FAIL exit {rc}, no test report: {log.strip().splitlines()[-1:]}"))
passed, failed, skipped = [], [], 0
for suite in data["testsuites"]:
    for t in suite["testsuite"]:
        name = f"{suite['name']}.{t['name']}"
        if t.get("failures"): failed.append(name)
        elif t.get("result") == "SKIPPED": skipped += 1
        elif t.get("status") == "RUN": passed.append(name)
reasons = set(re.findall(r"Skipped\n(.*)\n", log))
unnamed = [r for r in reasons if not re.search(r"needs \d+ CUDA devices?|no CUDA device", r)]
silent = [n for n in passed if "TooFewDevices" not in n]
problems = []
if rc: problems.append(f"exit {rc}")
if failed: problems.append(f"failed: {failed[:3]}")
if silent: problems.append(f"passed without a GPU: {silent[:3]}")
if not skipped: problems.append("nothing skipped")
if unnamed: problems.append(f"a skip that names no missing device: {unnamed[0]}")
if problems: print("FAIL " + "; ".join(problems))
else:
    short = sorted({re.split(r" \(|: ", r)[0] for r in reasons})
    extra = f"; {len(passed)} about the refusal passed" if passed else ""
    print(f"ok {skipped} skipped ({'; '.join(short)}){extra}")
PY
  )
  if [[ $verdict == ok* ]]; then ok "$binary --gtest_filter='$filter': ${verdict#ok }"
  else fail "$binary --gtest_filter='$filter': ${verdict#FAIL }"; fi
done

for spec in "layer_bench --backend=cuda" "backend_bandwidth --backend cuda" \
  "staging_bench --backend cuda"; do
  # shellcheck disable=SC2086 # the spec's words are the arguments
  text=$(run_bundled 60 $spec 2>&1)
  rc=$?
  if ((rc == 2)) && grep -Eq "no CUDA device|needs [0-9]+ CUDA device" <<<"$text"; then
    ok "$spec: exit 2, $(head -1 <<<"$text" | cut -c1-110)"
  else
    fail "$spec: expected exit 2 naming the missing device, got exit $rc: $text"
  fi
done

text=$(env -i PATH=/usr/bin:/bin HOME="${HOME:-/root}" timeout -k 5 300 "$dir/gpu-check.sh" 2>&1)
rc=$?
if ((rc == 2)) && [[ $(grep -c . <<<"$text") == 1 ]] && grep -q "no GPU found" <<<"$text"; then
  ok "gpu-check.sh: exit 2 and one line: $(cut -c1-120 <<<"$text")..."
else
  fail "gpu-check.sh: expected exit 2 and one line saying no GPU found, got exit $rc: $text"
fi

env -i PATH=/usr/bin:/bin HOME="${HOME:-/root}" timeout -k 5 600 "$dir/gpu-check.sh" --rehearsal \
  --out "$out/rehearsal" >"$out/rehearsal.log" 2>&1
rc=$?
verdict=$(python3 - "$out/rehearsal" "$out/rehearsal.log" "$rc" "$inside" <<'PY'
import json, sys
folder, log, rc = sys.argv[1], open(sys.argv[2]).read().splitlines(), int(sys.argv[3])
hidden = sys.argv[4] == "hide"
path = f"{folder}/results.json"
problems = []
if not log or log[-1] != path: problems.append(f"the last line is {log[-1] if log else None!r}, not {path}")
try:
    r = json.load(open(path))
except OSError:
    sys.exit(print(f"FAIL exit {rc}, no {path}: {log[-1:]}"))
steps = {f"{s['group']}/{s['name']}": s for s in r["steps"]}
# Everything that needs no GPU, compute-sanitizer or PyTorch runs on the CPU and must pass.
must_pass = ([f"modes/{m}-d{d}-threads" for d in (1, 2, 4) for m in ("tp", "tp-sp", "ulysses")]
             + [f"modes/llama-{m}-d2-threads" for m in ("tp", "tp-sp", "ulysses")]
             + ["modes/single-d1-threads", "layer_step/layer_bench", "layer_step/layer_bench-llama",
                "bandwidth/backend_bandwidth", "staging/staging_bench"]
             + [f"compare/{k}-{t}" for t in ("f32", "f64") for k in ("dump-device", "dump-cpu", "check")])
expected = must_pass + [f"tests/{b}" for b in ("autograd_tests", "parallel_tests", "cuda_tests", "nccl_tests")] + [
    f"sanitizer/{c}{m}" for c in ("memcheck", "racecheck") for m in ("", "-llama")] + [
    "layer_step/torch_layer", "layer_step/torch_layer-llama", "probe/probe"]
missing = [n for n in expected if n not in steps]
if missing: problems.append(f"steps missing from results.json: {missing}")
bad = [f"{n}: {steps[n]['status']} {steps[n].get('detail', '')}" for n in must_pass if n in steps and steps[n]["status"] != "passed"]
if bad: problems.append(f"failed: {[b[:200] for b in bad[:3]]}")
if rc != (0 if r["passed"] else 1): problems.append(f"exit {rc} while passed is {r['passed']}")
# The layer step ran on the CPU for both models: every row has shardscope's time.
rows = r["figures"].get("layer_step", {}).get("rows", [])
if {row.get("model") for row in rows} != {"gpt", "llama"} or any(row["shardscope_ms"] is None for row in rows):
    problems.append(f"layer_step rows without shardscope's time or a model: {rows}")
if not r["summary"] or not r["rehearsal"]: problems.append("no summary or not marked a rehearsal")
runtime = r["machine"]["libraries"].get("gcc-runtime")
if hidden and runtime != "bundle":  # the system's is hidden: env.sh must take the bundle's
    problems.append(f"env.sh chose gcc-runtime={runtime} with the system's libstdc++ hidden")
print("FAIL " + "; ".join(problems) if problems else
      f"ok {len(steps)} steps in results.json, the {len(must_pass)} CPU ones passed, exit {rc}, "
      f"its path printed last, gcc-runtime={runtime}")
PY
)
if [[ $verdict == ok* ]]; then ok "gpu-check.sh --rehearsal: ${verdict#ok }"
else fail "gpu-check.sh --rehearsal: ${verdict#FAIL } (log: $out/rehearsal.log)"; fi

((failures == 0)) && rm -rf "$out"
exit $((failures > 0))
