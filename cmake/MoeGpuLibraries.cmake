# NVIDIA's header-only GPU libraries for the Hopper paths (sm_90a): the cuDNN frontend (fused attention
# through cuDNN's graph API) and CUTLASS (the experts' grouped GEMM). Neither is a Debian package:
# scripts/fetch-gpu-headers.sh takes their C++ headers out of pinned PyPI wheels into a cache outside
# the tree (~/.cache/moe-gpu-headers), once; a warm cache builds offline. Each folder is a cache
# variable, so a machine with its own copies points at them instead:
#   -DMOE_CUDNN_FRONTEND_INCLUDE=/opt/cudnn-frontend/include -DMOE_CUTLASS_INCLUDE=/opt/cutlass/include
# MOE_GPU_HEADERS: AUTO (fetch what is not given; without them, a warning and no sm_90a paths), ON (a
# configure error instead), OFF (neither). Only with CUDA: the CPU builds need neither.
# Sets MOE_SM90A_ENABLED and MOE_CUDNN_FRONTEND_VERSION / MOE_CUTLASS_VERSION.
set(MOE_GPU_HEADERS AUTO CACHE STRING "cuDNN frontend and CUTLASS headers: AUTO, ON (required), OFF")
set_property(CACHE MOE_GPU_HEADERS PROPERTY STRINGS AUTO ON OFF)
set(MOE_CUDNN_FRONTEND_INCLUDE "" CACHE PATH "the cuDNN frontend's include folder (has cudnn_frontend.h); empty: fetched")
set(MOE_CUTLASS_INCLUDE "" CACHE PATH "CUTLASS's include folder (has cutlass/cutlass.h and cute/); empty: fetched")

set(MOE_SM90A_ENABLED OFF)

# Reads "#define <macro> <number>" values out of a header: "1.32.0".
function(moe_header_version header out)
  set(parts)
  foreach(macro IN LISTS ARGN)
    file(STRINGS "${header}" line REGEX "#define[ \t]+${macro}[ \t]+[0-9]+")
    string(REGEX REPLACE ".*${macro}[ \t]+([0-9]+).*" "\\1" value "${line}")
    if(value STREQUAL "")
      set(${out} "" PARENT_SCOPE)
      return()
    endif()
    list(APPEND parts ${value})
  endforeach()
  list(JOIN parts "." version)
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

# Runs the fetch script and fills the variables left empty from its "NAME VERSION DIR" lines.
function(moe_fetch_gpu_headers ok)
  execute_process(COMMAND ${PROJECT_SOURCE_DIR}/scripts/fetch-gpu-headers.sh
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(${MOE_GPU_HEADERS_LEVEL} "moe: scripts/fetch-gpu-headers.sh failed: ${err}")
    set(${ok} OFF PARENT_SCOPE)
    return()
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    if(line MATCHES "^cudnn-frontend [^ ]+ (.+)$" AND NOT EXISTS "${MOE_CUDNN_FRONTEND_INCLUDE}/cudnn_frontend.h")
      set(MOE_CUDNN_FRONTEND_INCLUDE "${CMAKE_MATCH_1}" CACHE PATH "" FORCE)
    elseif(line MATCHES "^cutlass [^ ]+ (.+)$" AND NOT EXISTS "${MOE_CUTLASS_INCLUDE}/cutlass/cutlass.h")
      set(MOE_CUTLASS_INCLUDE "${CMAKE_MATCH_1}" CACHE PATH "" FORCE)
    endif()
  endforeach()
  set(${ok} ON PARENT_SCOPE)
endfunction()

if(MOE_CUDA_ENABLED AND NOT MOE_GPU_HEADERS STREQUAL "OFF")
  if(MOE_GPU_HEADERS STREQUAL "ON")
    set(MOE_GPU_HEADERS_LEVEL FATAL_ERROR)
  else()
    set(MOE_GPU_HEADERS_LEVEL WARNING)
  endif()
  # Fetched when not given, or when the folder given is gone (a cleared cache).
  if(NOT EXISTS "${MOE_CUDNN_FRONTEND_INCLUDE}/cudnn_frontend.h" OR NOT EXISTS "${MOE_CUTLASS_INCLUDE}/cutlass/cutlass.h")
    moe_fetch_gpu_headers(fetched)  # a failure is reported there; the checks below say what is missing
  endif()
  set(MOE_CUDNN_FRONTEND_VERSION "")
  set(MOE_CUTLASS_VERSION "")
  if(EXISTS "${MOE_CUDNN_FRONTEND_INCLUDE}/cudnn_frontend_version.h")
    moe_header_version("${MOE_CUDNN_FRONTEND_INCLUDE}/cudnn_frontend_version.h" MOE_CUDNN_FRONTEND_VERSION
                       CUDNN_FRONTEND_MAJOR_VERSION CUDNN_FRONTEND_MINOR_VERSION CUDNN_FRONTEND_PATCH_VERSION)
  endif()
  if(EXISTS "${MOE_CUTLASS_INCLUDE}/cutlass/version.h" AND EXISTS "${MOE_CUTLASS_INCLUDE}/cute/tensor.hpp")
    moe_header_version("${MOE_CUTLASS_INCLUDE}/cutlass/version.h" MOE_CUTLASS_VERSION
                       CUTLASS_MAJOR CUTLASS_MINOR CUTLASS_PATCH)
  endif()
  if(MOE_CUDNN_FRONTEND_VERSION AND MOE_CUTLASS_VERSION)
    set(MOE_SM90A_ENABLED ON)
    message(STATUS "moe: cudnn-frontend ${MOE_CUDNN_FRONTEND_VERSION} (headers, ${MOE_CUDNN_FRONTEND_INCLUDE})")
    message(STATUS "moe: cutlass ${MOE_CUTLASS_VERSION} (headers, ${MOE_CUTLASS_INCLUDE})")
  else()
    message(${MOE_GPU_HEADERS_LEVEL}
            "moe: the cuDNN frontend (MOE_CUDNN_FRONTEND_INCLUDE='${MOE_CUDNN_FRONTEND_INCLUDE}') or CUTLASS "
            "(MOE_CUTLASS_INCLUDE='${MOE_CUTLASS_INCLUDE}') headers were not found: the sm_90a paths (cuDNN "
            "attention, CUTLASS grouped GEMM) are not built. scripts/fetch-gpu-headers.sh fetches them (PyPI).")
  endif()
endif()
