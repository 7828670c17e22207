# Compiler launcher, flags, CPU target and the CUDA language.

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  set(CMAKE_C_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
endif()

# Warnings for our own targets (third-party headers come in as system includes).
# GCC 12 reports false maybe-uninitialized warnings through std::variant (StatusOr); they are off.
# MOE_WERROR=OFF keeps the warnings but not as errors (tests/gpu/check.sh's retry on an unknown toolkit).
option(MOE_WERROR "Treat warnings as errors" ON)
set(MOE_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter -Wno-maybe-uninitialized -Wno-missing-field-initializers)
if(NOT MOE_WERROR)
  list(REMOVE_ITEM MOE_WARNINGS -Werror)
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")  # the fuzz build: clang's own warnings are reported, not fatal
  set(MOE_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
endif()
# Release: -O2 with line tables. The sanitizer and fuzz trees (scripts/sanitize.sh, scripts/fuzz.sh)
# set MOE_RELEASE_FLAGS to build faster (their builds dominate CI's time on 2 cores).
set(MOE_RELEASE_FLAGS "-O2 -g1" CACHE STRING "optimisation and debug flags of a Release build (NDEBUG is added)")
set(CMAKE_CXX_FLAGS_RELEASE "${MOE_RELEASE_FLAGS} -DNDEBUG")
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O2 -g -DNDEBUG")

# AVX2 + FMA (x86-64-v3) when the machine that builds can run it: the CPU kernels' loops vectorise.
include(CheckCXXSourceRuns)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64" AND NOT DEFINED MOE_X86_64_V3)
  check_cxx_source_runs("int main(){return __builtin_cpu_supports(\"avx2\") && __builtin_cpu_supports(\"fma\") ? 0 : 1;}" MOE_HOST_AVX2)
  set(MOE_X86_64_V3 ${MOE_HOST_AVX2} CACHE BOOL "Compile for x86-64-v3 (AVX2, FMA)")
endif()
if(MOE_X86_64_V3)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=x86-64-v3>)
endif()

# CUDA: sm_90 (H100/H200), sm_100 (B200/GB200), sm_103 (B300/GB300) when this machine has a GPU or
# CMAKE_CUDA_ARCHITECTURES says so (the images do: deploy/docker/Dockerfile). On a machine without
# one (CI, the CPU machines) the kernels are compiled for sm_90 alone: that checks they build, and
# each further architecture would add its own device compilation (about 4 min of the 2-core build)
# for code nothing here can run.
set(MOE_CUDA_ENABLED OFF)
if(NOT MOE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      execute_process(COMMAND nvidia-smi -L RESULT_VARIABLE moe_smi_rc OUTPUT_QUIET ERROR_QUIET)
      if(moe_smi_rc EQUAL 0)
        set(CMAKE_CUDA_ARCHITECTURES 90 100 103)
      else()
        set(CMAKE_CUDA_ARCHITECTURES 90)
        message(STATUS "moe: no GPU here: CUDA kernels compiled for sm_90 only (to check they build); "
                       "-DCMAKE_CUDA_ARCHITECTURES=\"90;100;103\" for a build to ship")
      endif()
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 does not know C++20 for nvcc; the .cu files need only 17
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(MOE_CUDA_ENABLED ON)
  elseif(MOE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MOE_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER or PATH)")
  endif()
endif()
