# shellcheck shell=bash
# The GPU bundle's environment (scripts/gpu-bundle.sh copies this file into the bundle), sourced
# by bash:  . DIR/env.sh
# PATH gets DIR/bin first. LD_LIBRARY_PATH gets DIR/lib first, then, for each library the bundle
# leaves to the GPU machine (bundle.env's SHARDSCOPE_BUNDLE_EXTERNAL: libcublas.so.13,
# libcublasLt.so.13, libnccl.so.2), the first folder holding it among:
#   the folders of LD_LIBRARY_PATH as it was, $CUDA_HOME/lib64 and lib, $CUDA_PATH/lib64 and lib,
#   /usr/local/cuda/lib64 and lib, python3's site-packages nvidia/*/lib (pip's nvidia-cublas and
#   nvidia-nccl-cu13, which PyTorch installs), and the loader's cache (ldconfig -p);
# then LD_LIBRARY_PATH as it was (a container's driver folder stays reachable).
# The GCC runtime (libstdc++.so.6, libgcc_s.so.1): the machine's own when the loader's cache has
# both and they define every symbol version the bundle needs (bundle.env's
# SHARDSCOPE_BUNDLE_GCC_RUNTIME_NEEDS); otherwise DIR/lib/gcc-runtime, right after DIR/lib.
# Sets SHARDSCOPE_BUNDLE_DIR and SHARDSCOPE_BUNDLE_FOUND ("libcublas.so.13=/usr/local/cuda/lib64
# libnccl.so.2=missing gcc-runtime=system ..."), and says on stderr which library it did not
# find and where it looked (SHARDSCOPE_BUNDLE_QUIET=1: silent).

SHARDSCOPE_BUNDLE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export SHARDSCOPE_BUNDLE_DIR
# shellcheck source=/dev/null
. "$SHARDSCOPE_BUNDLE_DIR/bundle.env"
# shellcheck disable=SC2046 # the names are SHARDSCOPE_BUNDLE_* words
export $(compgen -v SHARDSCOPE_BUNDLE_)

# The folders to look in, one a line, in order.
_shardscope_lib_folders() {
  local d sp
  local IFS=:
  for d in ${SHARDSCOPE_BUNDLE_PREVIOUS_LD_PATH:-}; do [[ -n $d ]] && echo "$d"; done
  unset IFS
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    [[ -n $d ]] && printf '%s\n' "$d/lib64" "$d/lib"
  done
  if command -v python3 >/dev/null; then
    while IFS= read -r sp; do
      [[ -d $sp/nvidia ]] || continue
      for d in "$sp"/nvidia/*/lib "$sp"/nvidia/*/lib64; do [[ -d $d ]] && echo "$d"; done
    done < <(timeout 30 python3 -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
  fi
}

# The folder holding $1, or nothing. The folders are read in full before the search (leaving
# the list half read made its writer fail with "echo: write error: Broken pipe" wherever SIGPIPE
# is ignored, as under ncu).
_shardscope_find_lib() {
  local d ldconfig folders
  mapfile -t folders < <(_shardscope_lib_folders)
  for d in "${folders[@]}"; do
    if [[ -e $d/$1 ]]; then
      echo "$d"
      return
    fi
  done
  ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
  [[ -x $ldconfig ]] || return 0
  d=$("$ldconfig" -p 2>/dev/null | awk -v n="$1" '$1 == n && /x86-64/ { print $NF; exit }')
  [[ -n $d ]] && dirname "$d"
}

# "system" when the machine's libstdc++.so.6 and libgcc_s.so.1 (found as the loader finds them
# from the cache) define every version in SHARDSCOPE_BUNDLE_GCC_RUNTIME_NEEDS, else "bundle".
_shardscope_gcc_runtime() {
  local ldconfig files=() f v
  ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
  [[ -x $ldconfig ]] || { echo bundle; return; }
  for f in libstdc++.so.6 libgcc_s.so.1; do
    f=$("$ldconfig" -p 2>/dev/null | awk -v n="$f" '$1 == n && /x86-64/ { print $NF; exit }')
    [[ -n $f && -s $(readlink -f "$f") ]] || { echo bundle; return; }
    files+=("$f")
  done
  for v in ${SHARDSCOPE_BUNDLE_GCC_RUNTIME_NEEDS:-}; do # GCC_ in libgcc_s, the rest libstdc++
    f=${files[0]}
    [[ $v == GCC_* ]] && f=${files[1]}
    grep -aqF "$v" "$f" 2>/dev/null || { echo bundle; return; }
  done
  echo system
}

SHARDSCOPE_BUNDLE_PREVIOUS_LD_PATH=${SHARDSCOPE_BUNDLE_PREVIOUS_LD_PATH-${LD_LIBRARY_PATH:-}}
export SHARDSCOPE_BUNDLE_PREVIOUS_LD_PATH
_shardscope_path=$SHARDSCOPE_BUNDLE_DIR/lib
SHARDSCOPE_BUNDLE_FOUND=""
for _shardscope_name in $SHARDSCOPE_BUNDLE_EXTERNAL; do
  _shardscope_dir=$(_shardscope_find_lib "$_shardscope_name")
  SHARDSCOPE_BUNDLE_FOUND+="${SHARDSCOPE_BUNDLE_FOUND:+ }$_shardscope_name=${_shardscope_dir:-missing}"
  if [[ -z $_shardscope_dir ]]; then
    [[ ${SHARDSCOPE_BUNDLE_QUIET:-0} == 1 ]] ||
      echo "env.sh: $_shardscope_name not found (looked in LD_LIBRARY_PATH, \$CUDA_HOME, \$CUDA_PATH, /usr/local/cuda, python3's site-packages nvidia/*/lib, ldconfig -p): set CUDA_HOME or LD_LIBRARY_PATH to its folder" >&2
  elif [[ :$_shardscope_path: != *":$_shardscope_dir:"* ]]; then
    _shardscope_path+=:$_shardscope_dir
  fi
done
_shardscope_dir=$(_shardscope_gcc_runtime)
SHARDSCOPE_BUNDLE_FOUND+=" gcc-runtime=$_shardscope_dir"
if [[ $_shardscope_dir == bundle ]]; then
  _shardscope_path=$SHARDSCOPE_BUNDLE_DIR/lib:$SHARDSCOPE_BUNDLE_DIR/lib/gcc-runtime${_shardscope_path#"$SHARDSCOPE_BUNDLE_DIR/lib"}
fi
export SHARDSCOPE_BUNDLE_FOUND
export LD_LIBRARY_PATH=$_shardscope_path${SHARDSCOPE_BUNDLE_PREVIOUS_LD_PATH:+:$SHARDSCOPE_BUNDLE_PREVIOUS_LD_PATH}
[[ :$PATH: == *":$SHARDSCOPE_BUNDLE_DIR/bin:"* ]] || export PATH=$SHARDSCOPE_BUNDLE_DIR/bin:$PATH
unset _shardscope_path _shardscope_name _shardscope_dir
unset -f _shardscope_lib_folders _shardscope_find_lib _shardscope_gcc_runtime
