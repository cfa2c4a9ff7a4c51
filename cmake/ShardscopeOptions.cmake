# Build options, warnings, sanitizers and the AUTO detection of optional dependencies.

option(SHARDSCOPE_WERROR "Treat compiler warnings as errors (the test command turns this on)" OFF)
option(SHARDSCOPE_BUILD_TESTS "Build the GoogleTest suites" ON)
option(SHARDSCOPE_BUILD_BENCH "Build the Google Benchmark programs" ON)
set(SHARDSCOPE_SANITIZE "" CACHE STRING "Sanitizers: empty, 'address;undefined' or 'thread'")

# Optional parts: AUTO turns a part on where its dependency is found, ON requires it.
foreach(part CUDA MPI VIZ)
  set(SHARDSCOPE_${part} AUTO CACHE STRING "Build the ${part} part: AUTO, ON or OFF")
  set_property(CACHE SHARDSCOPE_${part} PROPERTY STRINGS AUTO ON OFF)
endforeach()

# ccache with the source tree as its base_dir: paths under it are hashed relative, so every clone
# (a CI run's fresh clone, a second work tree) shares one cache. hash_dir off for the same reason:
# debug builds would otherwise hash the build directory. Arguments that name the tree inside a
# value (-DX="/path") are still hashed whole, so a hit never crosses two different sources.
find_program(SHARDSCOPE_CCACHE ccache)
if(SHARDSCOPE_CCACHE)
  set(shardscope_launcher "${CMAKE_COMMAND}" -E env "CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}"
                          CCACHE_NOHASHDIR=1 "${SHARDSCOPE_CCACHE}")
  set(CMAKE_CXX_COMPILER_LAUNCHER ${shardscope_launcher})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${shardscope_launcher})
endif()

# shardscope_resolve_part(PART FOUND): turns AUTO into ON/OFF; ON without the dependency fails.
function(shardscope_resolve_part part found what)
  set(value "${SHARDSCOPE_${part}}")
  if(value STREQUAL "AUTO")
    if(found)
      set(value ON)
    else()
      set(value OFF)
    endif()
  elseif(value STREQUAL "ON" AND NOT found)
    message(FATAL_ERROR "SHARDSCOPE_${part}=ON but ${what} was not found")
  endif()
  set(SHARDSCOPE_HAVE_${part} ${value} PARENT_SCOPE)
  message(STATUS "shardscope: ${part} part ${value} (${what})")
endfunction()

include(CheckLanguage)
if(NOT SHARDSCOPE_CUDA STREQUAL "OFF")
  check_language(CUDA)
endif()
shardscope_resolve_part(CUDA "${CMAKE_CUDA_COMPILER}"
                        "nvcc, cuBLAS and NCCL from the CUDA toolkit for the CUDA backend")
if(SHARDSCOPE_HAVE_CUDA)
  # Ampere and Hopper by default; -DCMAKE_CUDA_ARCHITECTURES=... overrides (set before
  # enable_language, which would otherwise pick the compiler's default).
  set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures to compile for")
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)  # the same libcudart as CUDA::cudart
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
find_package(MPI QUIET COMPONENTS CXX)
shardscope_resolve_part(MPI "${MPI_CXX_FOUND}" "MPI for MpiComm: Debian libopenmpi-dev")
# The visualizer needs Dear ImGui with its GLFW and OpenGL 3 backend sources (Debian:
# libimgui-dev, which ships them under its documentation), GLFW 3 and OpenGL.
find_path(SHARDSCOPE_IMGUI_INCLUDE imgui.h PATH_SUFFIXES imgui)
find_path(SHARDSCOPE_IMGUI_BACKENDS imgui_impl_opengl3.cpp
          PATHS /usr/share/doc/libimgui-dev/examples/backends NO_DEFAULT_PATH)
find_path(SHARDSCOPE_GLFW_INCLUDE GLFW/glfw3.h)
find_path(SHARDSCOPE_STB_INCLUDE stb_image_write.h PATH_SUFFIXES stb)
set(viz_found FALSE)
if(SHARDSCOPE_IMGUI_INCLUDE AND SHARDSCOPE_IMGUI_BACKENDS AND SHARDSCOPE_GLFW_INCLUDE
   AND SHARDSCOPE_STB_INCLUDE)
  set(viz_found TRUE)
endif()
shardscope_resolve_part(VIZ "${viz_found}"
                        "Dear ImGui with its backends, GLFW 3 and stb: Debian libimgui-dev, libglfw3-dev, libstb-dev")

# shardscope_target_defaults(TARGET): warnings (errors with SHARDSCOPE_WERROR), and for a program
# the CUDA module as a build dependency.
# C++ sources get the full warning set; CUDA sources (nvcc) the host compiler's -Wall and nvcc's
# own warnings, errors too under SHARDSCOPE_WERROR.
function(shardscope_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
                              -Wnon-virtual-dtor>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall --expt-relaxed-constexpr>)
  if(SHARDSCOPE_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
                                             $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
  endif()
  # Any program may load the CUDA module at run time (--backend cuda, a gpu test): building the
  # program builds the module, though nothing links it.
  get_target_property(type ${target} TYPE)
  if(SHARDSCOPE_HAVE_CUDA AND type STREQUAL "EXECUTABLE")
    add_dependencies(${target} shardscope_cuda)
  endif()
endfunction()

# libFuzzer targets (fuzz/, the `fuzz` preset): clang only. Every library and target gets
# coverage for libFuzzer (fuzzer-no-link) with ASan + UBSan; fuzz/ links the fuzz targets with
# -fsanitize=fuzzer (libFuzzer's main, Debian libclang-rt-14-dev).
option(SHARDSCOPE_FUZZ "Build the libFuzzer targets in fuzz/ (needs clang++)" OFF)
if(SHARDSCOPE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "SHARDSCOPE_FUZZ=ON needs clang++ (libFuzzer), given "
                        "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER}: use cmake --preset fuzz")
  endif()
  if(SHARDSCOPE_SANITIZE)
    message(FATAL_ERROR "SHARDSCOPE_FUZZ=ON brings its own sanitizers (address, undefined); "
                        "given SHARDSCOPE_SANITIZE=${SHARDSCOPE_SANITIZE}, leave it empty")
  endif()
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined;-fno-omit-frame-pointer;-fno-sanitize-recover=all>")
  add_link_options(-fsanitize=address,undefined)
endif()

if(SHARDSCOPE_SANITIZE)
  string(REPLACE ";" "," sanitizers "${SHARDSCOPE_SANITIZE}")
  add_compile_options(-fsanitize=${sanitizers} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${sanitizers})
endif()

# The instruction set the CPU backend's loop files (autograd/CMakeLists.txt) are compiled for in
# optimised builds: "native" (the default) is this machine's x86-64 level, found at configure time
# and written out as the level it is (so that ccache never shares objects between machines of
# different levels); x86-64, x86-64-v2, -v3 or -v4 name one; "none" leaves the compiler's default.
# The library checks when its CPU backend is made that the CPU has the level (check_cpu_isa).
set(SHARDSCOPE_CPU_ISA "native" CACHE STRING
    "CPU loops' instruction set: native, x86-64, x86-64-v2, x86-64-v3, x86-64-v4 or none")
set_property(CACHE SHARDSCOPE_CPU_ISA PROPERTY STRINGS native x86-64 x86-64-v2 x86-64-v3
                                               x86-64-v4 none)
set(SHARDSCOPE_CPU_LEVEL 0)  # 0: no -march flag; 1 to 4: x86-64 to x86-64-v4
if(SHARDSCOPE_CPU_ISA STREQUAL "native")
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64)$")
    try_run(cpu_isa_ran cpu_isa_built ${CMAKE_BINARY_DIR}/cpu_isa_probe
            ${CMAKE_CURRENT_LIST_DIR}/cpu_isa_probe.cpp
            CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${PROJECT_SOURCE_DIR}"
            CXX_STANDARD 17
            RUN_OUTPUT_VARIABLE cpu_isa_output)
    if(cpu_isa_built AND cpu_isa_ran EQUAL 0)
      string(STRIP "${cpu_isa_output}" SHARDSCOPE_CPU_LEVEL)
    else()
      message(WARNING "shardscope: the x86-64 level probe did not run; CPU loops at the baseline")
      set(SHARDSCOPE_CPU_LEVEL 1)
    endif()
  endif()
elseif(SHARDSCOPE_CPU_ISA STREQUAL "x86-64")
  set(SHARDSCOPE_CPU_LEVEL 1)
elseif(SHARDSCOPE_CPU_ISA MATCHES "^x86-64-v([234])$")
  set(SHARDSCOPE_CPU_LEVEL ${CMAKE_MATCH_1})
elseif(NOT SHARDSCOPE_CPU_ISA STREQUAL "none")
  message(FATAL_ERROR "SHARDSCOPE_CPU_ISA must be native, x86-64, x86-64-v2, x86-64-v3, "
                      "x86-64-v4 or none, given '${SHARDSCOPE_CPU_ISA}'")
endif()
set(SHARDSCOPE_CPU_MARCH "")
if(SHARDSCOPE_CPU_LEVEL EQUAL 1)
  set(SHARDSCOPE_CPU_MARCH "-march=x86-64")
elseif(SHARDSCOPE_CPU_LEVEL GREATER 1)
  set(SHARDSCOPE_CPU_MARCH "-march=x86-64-v${SHARDSCOPE_CPU_LEVEL}")
endif()
message(STATUS "shardscope: CPU loops for ${SHARDSCOPE_CPU_ISA}: "
               "'${SHARDSCOPE_CPU_MARCH}' in optimised builds")
