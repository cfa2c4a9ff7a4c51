#!/usr/bin/env bash
# The GPU bundle: builds here (x86-64, Release, CUDA on for sm_90, MPI and the visualizer off,
# warnings as errors) the programs that the GPU check runs, and copies them into one folder that
# runs on a GPU machine without this machine's Debian libraries:
#   bash scripts/gpu-bundle.sh DIR
# DIR gets
#   bin/          shardscope, the test binaries holding gpu-labelled tests (autograd_tests,
#                 parallel_tests, cuda_tests, nccl_tests), layer_bench, backend_bandwidth and
#                 staging_bench:
#                 stripped, RUNPATH $ORIGIN/../lib
#   lib/          every shared library they load that a bare CUDA machine lacks: the ldd closure
#                 of bin/ and of every libshardscope_*.so of the build (those are copied whether
#                 or not ldd lists them: a module loaded with dlopen is not), less glibc's own
#                 libraries, the driver's (libcuda, libnvidia-*) and the CUDA toolkit's large ones
#                 the GPU machine has (libcublas, libcublasLt, libnccl: 800 MB here); libcudart
#                 is carried
#   lib/gcc-runtime/  libstdc++ and libgcc_s, which env.sh puts on the path only when the GPU
#                 machine's own lack a symbol version the bundle needs (a newer system copy is
#                 better: the CUDA tools inject their own libraries into our processes; ours
#                 needs glibc 2.36, the programs 2.34)
#   env.sh        sourced: sets LD_LIBRARY_PATH to DIR/lib plus the folders where it finds
#                 libcublas / libnccl on that machine, and PATH to DIR/bin
#   run           DIR/run PROGRAM ARGS...: runs a program with env.sh's settings
#   gpu-check.sh  the one command to run on the GPU machine (scripts/gpu/gpu_check.py beside it)
#   bundle.env    facts env.sh and the check read (the libraries expected on the GPU machine,
#                 the commit, the build)
#   MANIFEST      every file with its size, what it is and the glibc version it needs
# The build lives in build/gpu-bundle-build (GPU_BUNDLE_BUILD_DIR overrides; JOBS: parallel
# jobs, nproc by default). DIR must be absent, empty or an earlier bundle (it is replaced), and
# must stay under 60 MiB: the script fails naming the size otherwise.
set -euo pipefail
root=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
if (($# != 1)); then
  echo "usage: bash scripts/gpu-bundle.sh DIR" >&2
  exit 2
fi
dir=$(realpath -m "$1")
build=$(realpath -m "${GPU_BUNDLE_BUILD_DIR:-$root/build/gpu-bundle-build}")
jobs=${JOBS:-$(nproc)}
limit_mib=60
limit_bytes=$((limit_mib * 1024 * 1024))
programs=(shardscope autograd_tests parallel_tests cuda_tests nccl_tests layer_bench
  backend_bandwidth staging_bench)
# Not carried: glibc's libraries, the driver's, and the CUDA libraries the GPU machine provides.
system_re='^(ld-linux[-a-z0-9_]*|linux-vdso|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libBrokenLocale|libthread_db|libnss_[a-z]+)\.so'
driver_re='^(libcuda|libnvidia-[-a-z0-9_]+)\.so'
provided_re='^(libcublas|libcublasLt|libnccl)\.so'
gcc_runtime_re='^(libstdc\+\+|libgcc_s)\.so'

die() {
  echo "gpu-bundle: $*" >&2
  exit 1
}

command -v patchelf >/dev/null ||
  die "patchelf is missing (Debian: apt-get install patchelf; scripts/setup.sh installs it)"
if [[ -e $dir ]]; then
  [[ -d $dir ]] || die "$dir exists and is not a folder"
  if [[ -n $(ls -A "$dir") && ! -f $dir/MANIFEST ]]; then
    die "$dir is not empty and holds no MANIFEST (not an earlier bundle): give an absent or empty folder"
  fi
fi
case $dir/ in "$root"/ | "$build"/*) die "DIR may not be the source tree or inside the build ($dir)" ;; esac

# ---- build ------------------------------------------------------------------------------------
# The CPU loops for x86-64-v3 (AVX2), not this machine's level: the bundle runs on another host.
echo "== gpu-bundle: configure $build (Release, CUDA sm_90, CPU loops x86-64-v3, MPI off, viz off, -Werror)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDSCOPE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DSHARDSCOPE_CPU_ISA=x86-64-v3 -DSHARDSCOPE_MPI=OFF -DSHARDSCOPE_VIZ=OFF \
  -DSHARDSCOPE_WERROR=ON -DSHARDSCOPE_BUILD_TESTS=ON -DSHARDSCOPE_BUILD_BENCH=ON \
  -DSHARDSCOPE_LIBEDIT=OFF >/dev/null
echo "== gpu-bundle: build ${programs[*]} (-j $jobs)"
cmake --build "$build" -j "$jobs" --target "${programs[@]}"

# The one executable file named $1 in the build (not under CMakeFiles/).
built_program() {
  local found
  mapfile -t found < <(find "$build" -path '*/CMakeFiles' -prune -o -type f -name "$1" -perm -u+x -print)
  ((${#found[@]} == 1)) || die "expected one built program $1 under $build, found ${#found[@]}: ${found[*]:-none}"
  echo "${found[0]}"
}

# ---- copy -------------------------------------------------------------------------------------
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib"
declare -A source_of=() # bundle path -> where it came from
sources=()              # the build's files whose ldd closure is carried
for p in "${programs[@]}"; do
  src=$(built_program "$p")
  sources+=("$src")
  cp "$src" "$dir/bin/$p"
  source_of[bin/$p]=$src
done
# Our shared libraries, under their soname: those ldd finds and those loaded with dlopen.
while IFS= read -r -d '' src; do
  soname=$(objdump -p "$src" | awk '$1 == "SONAME" { print $2 }')
  name=${soname:-$(basename "$src")}
  [[ -e $dir/lib/$name ]] && continue
  sources+=("$src")
  cp "$src" "$dir/lib/$name"
  source_of[lib/$name]=$src
done < <(find "$build" -path '*/CMakeFiles' -prune -o -type f -name 'libshardscope_*.so*' -print0)

# The ldd closure of the build's files (ldd lists indirect dependencies too), resolved as the
# build tree resolves them.
external=()
for src in "${sources[@]}"; do
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue # the vdso and the loader itself
    [[ $name =~ $system_re || $name =~ $driver_re ]] && continue
    if [[ $name =~ $provided_re ]]; then
      [[ " ${external[*]} " == *" $name "* ]] || external+=("$name")
      continue
    fi
    [[ $path == not ]] && die "$src needs $name, which ldd does not find here"
    [[ -e $dir/lib/$name ]] && continue
    cp -L "$path" "$dir/lib/$name"
    source_of[lib/$name]=$(readlink -f "$path")
  done < <(env -u LD_LIBRARY_PATH ldd "$src")
done

# The GCC runtime apart, for env.sh to use only where the system's is too old.
mkdir -p "$dir/lib/gcc-runtime"
for f in "$dir"/lib/*; do
  [[ $(basename "$f") =~ $gcc_runtime_re ]] && mv "$f" "$dir/lib/gcc-runtime/"
done

# Ours stripped and pointed at lib/; the carried libraries are copied as they are.
for f in "$dir"/bin/*; do
  strip --strip-all "$f"
  patchelf --set-rpath '$ORIGIN/../lib' "$f"
done
for f in "$dir"/lib/libshardscope_*; do
  [[ -e $f ]] || continue
  strip --strip-unneeded "$f"
  patchelf --set-rpath '$ORIGIN' "$f"
done

for f in env.sh run gpu-check.sh gpu_check.py gpu_check_steps.py; do
  install -m "$([[ $f == *.py || $f == env.sh ]] && echo 644 || echo 755)" \
    "$root/scripts/gpu/$f" "$dir/$f"
done
install -m 644 "$root/bench/torch_layer.py" "$dir/torch_layer.py"

# ---- facts and manifest -----------------------------------------------------------------------
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
dirty=""
[[ -n $(git -C "$root" status --porcelain 2>/dev/null) ]] && dirty=" (with uncommitted changes)"
nvcc_version=$("$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")" --version |
  sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p')
{
  echo "# The bundle's facts, written by scripts/gpu-bundle.sh; env.sh and gpu_check.py read them."
  printf 'SHARDSCOPE_BUNDLE_EXTERNAL=%q\n' "${external[*]}"
  printf 'SHARDSCOPE_BUNDLE_COMMIT=%q\n' "$commit$dirty"
  printf 'SHARDSCOPE_BUNDLE_BUILT=%q\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
  printf 'SHARDSCOPE_BUNDLE_NVCC=%q\n' "$nvcc_version"
  printf 'SHARDSCOPE_BUNDLE_CUDA_ARCHITECTURES=%q\n' 90
} >"$dir/bundle.env"

# highest_version FILE... [FAMILY]: the highest FAMILY_ version (GLIBC by default) the files'
# dynamic symbols use
highest_version() {
  local family=GLIBC files=("$@")
  [[ ${files[-1]} =~ ^[A-Z]+$ ]] && family=${files[-1]} && unset 'files[-1]'
  objdump -T "${files[@]}" 2>/dev/null | grep -oE "\b${family}_[0-9][0-9.]*" | sort -Vu | tail -1 || true
}
# What the GCC runtime on the GPU machine must provide for everything else: env.sh checks it.
needs=()
for family in GLIBCXX CXXABI GCC; do
  v=$(highest_version "$dir"/bin/* "$dir"/lib/*.so* "$family")
  [[ -n $v ]] && needs+=("$v")
done
printf 'SHARDSCOPE_BUNDLE_GCC_RUNTIME_NEEDS=%q\n' "${needs[*]}" >>"$dir/bundle.env"

describe() { # describe BUNDLE_PATH
  local rel=$1 src=${source_of[$1]:-} pkg
  case $rel in
    bin/shardscope) echo "the shardscope command line (run, check, debug, ...)" ;;
    bin/autograd_tests) echo "GoogleTest: autograd ops and layer on every backend (cuda instances: label gpu)" ;;
    bin/parallel_tests) echo "GoogleTest: parallel layer runs (the _cuda instances: label gpu)" ;;
    bin/cuda_tests) echo "GoogleTest: CUDA backend against the CPU backend (label gpu)" ;;
    bin/nccl_tests) echo "GoogleTest: NcclComm and the layer over NCCL (label gpu)" ;;
    bin/layer_bench) echo "Google Benchmark: layer step (--backend=cuda, --shape=s,b,h,a)" ;;
    bin/backend_bandwidth) echo "elementwise kernels' bandwidth beside a device copy" ;;
    bin/staging_bench) echo "all_reduce of ranks sharing the GPU, staged through host memory" ;;
    lib/libshardscope_*) echo "built from this tree ($(basename "$src"))" ;;
    *)
      if pkg=$(dpkg -S "$src" 2>/dev/null | head -1 | cut -d: -f1) && [[ -n $pkg ]]; then
        echo "Debian $pkg $(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null) ($src)"
      else
        echo "from $src"
      fi ;;
  esac
}

bytes=$(du -sb "$dir" | cut -f1)
glibc_max="" glibc_ours=""
{
  echo "shardscope GPU bundle"
  echo "commit:   $commit$dirty"
  echo "built:    $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release && echo "$PRETTY_NAME"),"
  echo "          glibc $(ldd --version | head -1 | awk '{print $NF}'), $(c++ --version | head -1), nvcc $nvcc_version,"
  echo "          CMAKE_BUILD_TYPE=Release, CMAKE_CUDA_ARCHITECTURES=90"
  echo "needs on the GPU machine: x86-64 Linux, an NVIDIA driver for CUDA 13 (R580 or newer),"
  echo "          ${external[*]} (env.sh finds them), and glibc >= GLIBC_OURS, or >= GLIBC_MAX"
  echo "          where the system's libstdc++ / libgcc_s lack one of ${needs[*]}"
  echo "          (then env.sh uses lib/gcc-runtime/, which needs glibc GLIBC_MAX)"
  echo "size:     $bytes bytes without this file ($(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB; the limit is $limit_mib MiB)"
  echo
  printf '%-28s %10s  %-12s %s\n' file bytes glibc what
  while IFS= read -r rel; do
    v=$(highest_version "$dir/$rel")
    [[ -n $v ]] && glibc_max=$(printf '%s\n%s\n' "$glibc_max" "$v" | sort -V | tail -1)
    [[ -n $v && $rel != lib/gcc-runtime/* ]] &&
      glibc_ours=$(printf '%s\n%s\n' "$glibc_ours" "$v" | sort -V | tail -1)
    printf '%-28s %10s  %-12s %s\n' "$rel" "$(stat -c %s "$dir/$rel")" "${v:--}" "$(describe "$rel")"
  done < <(cd "$dir" && find bin lib -type f | sort)
  printf '%-28s %10s  %-12s %s\n' env.sh "$(stat -c %s "$dir/env.sh")" - "sourced: the library path"
  printf '%-28s %10s  %-12s %s\n' run "$(stat -c %s "$dir/run")" - "DIR/run PROGRAM ARGS: a program with env.sh"
  printf '%-28s %10s  %-12s %s\n' gpu-check.sh "$(stat -c %s "$dir/gpu-check.sh")" - "the GPU check (docs/cuda.md)"
  printf '%-28s %10s  %-12s %s\n' gpu_check.py "$(stat -c %s "$dir/gpu_check.py")" - "the check, run by gpu-check.sh"
  printf '%-28s %10s  %-12s %s\n' gpu_check_steps.py "$(stat -c %s "$dir/gpu_check_steps.py")" - "its steps and summary"
  printf '%-28s %10s  %-12s %s\n' torch_layer.py "$(stat -c %s "$dir/torch_layer.py")" - "the layer step in PyTorch (bench/torch_layer.py)"
  printf '%-28s %10s  %-12s %s\n' bundle.env "$(stat -c %s "$dir/bundle.env")" - "the facts above, for env.sh and the check"
} >"$dir/MANIFEST.tmp"
sed "s/GLIBC_MAX/${glibc_max#GLIBC_}/g; s/GLIBC_OURS/${glibc_ours#GLIBC_}/g" "$dir/MANIFEST.tmp" >"$dir/MANIFEST"
rm "$dir/MANIFEST.tmp"
printf 'SHARDSCOPE_BUNDLE_GLIBC=%q\n' "${glibc_ours#GLIBC_}" >>"$dir/bundle.env"
printf 'SHARDSCOPE_BUNDLE_GLIBC_WITH_GCC_RUNTIME=%q\n' "${glibc_max#GLIBC_}" >>"$dir/bundle.env"

bytes=$(du -sb "$dir" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
if ((bytes >= limit_bytes)); then
  echo "gpu-bundle: $dir is $bytes bytes ($mib MiB), over the $limit_mib MiB limit; the largest files:" >&2
  (cd "$dir" && find bin lib -type f -printf '%12s  %p\n' | sort -rn | head -8) >&2
  exit 1
fi
echo "gpu-bundle: $dir: ${#programs[@]} programs, $(find "$dir/lib" -type f | wc -l) libraries," \
  "$mib MiB (limit $limit_mib MiB), needs glibc >= ${glibc_ours#GLIBC_} (${glibc_max#GLIBC_} with its own" \
  "libstdc++) and, on the GPU machine, ${external[*]}"
