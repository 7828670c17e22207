# Third-party dependencies. Everything optional is detected here once; targets test the MOE_* flags.

find_package(Threads REQUIRED)
find_package(OpenMP COMPONENTS CXX)

# OpenBLAS: prefer Debian's OpenMP build, which runs single-threaded when called inside our own
# OpenMP regions (no oversubscription) and shares our thread pool otherwise.
set(MOE_BLAS_ENABLED OFF)
if(NOT MOE_BLAS STREQUAL "OFF")
  find_library(MOE_OPENBLAS_LIBRARY NAMES openblas
               PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
               NO_DEFAULT_PATH)
  find_path(MOE_OPENBLAS_INCLUDE cblas.h
            PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
            NO_DEFAULT_PATH)
  if(NOT MOE_OPENBLAS_LIBRARY)
    find_library(MOE_OPENBLAS_LIBRARY NAMES openblas)
    find_path(MOE_OPENBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas)
  endif()
  if(MOE_OPENBLAS_LIBRARY AND MOE_OPENBLAS_INCLUDE)
    set(MOE_BLAS_ENABLED ON)
  elseif(MOE_BLAS STREQUAL "ON")
    message(FATAL_ERROR "MOE_BLAS=ON but OpenBLAS was not found (apt install libopenblas-openmp-dev)")
  endif()
endif()

# Gloo (CPU collectives over TCP).
find_package(Gloo CONFIG QUIET)
set(MOE_GLOO_ENABLED OFF)
if(Gloo_FOUND OR TARGET gloo)
  set(MOE_GLOO_ENABLED ON)
endif()

# SentencePiece (moe-prep's tokenizer).
find_library(MOE_SPM_LIBRARY sentencepiece)
find_library(MOE_SPM_TRAIN_LIBRARY sentencepiece_train)
find_path(MOE_SPM_INCLUDE sentencepiece_processor.h)
set(MOE_SPM_ENABLED OFF)
if(MOE_SPM_LIBRARY AND MOE_SPM_TRAIN_LIBRARY AND MOE_SPM_INCLUDE)
  set(MOE_SPM_ENABLED ON)
endif()

# Services.
set(MOE_SERVICES_ENABLED OFF)
if(NOT MOE_SERVICES STREQUAL "OFF")
  find_package(Protobuf QUIET)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(GRPCPP QUIET IMPORTED_TARGET grpc++)
  endif()
  find_program(MOE_GRPC_CPP_PLUGIN grpc_cpp_plugin)
  find_package(prometheus-cpp CONFIG QUIET)
  find_package(SQLite3 QUIET)
  find_package(absl CONFIG QUIET)
  find_package(CLI11 CONFIG QUIET)
  find_package(spdlog CONFIG QUIET)
  find_package(OpenSSL QUIET)  # libcrypto: the UDP heartbeats' HMAC (common/udp_beat.h)
  if(Protobuf_FOUND AND GRPCPP_FOUND AND MOE_GRPC_CPP_PLUGIN AND prometheus-cpp_FOUND AND SQLite3_FOUND AND absl_FOUND AND CLI11_FOUND
     AND spdlog_FOUND AND OpenSSL_FOUND)
    set(MOE_SERVICES_ENABLED ON)
  elseif(MOE_SERVICES STREQUAL "ON")
    message(FATAL_ERROR "MOE_SERVICES=ON but a dependency is missing (protobuf ${Protobuf_FOUND}, grpc++ ${GRPCPP_FOUND}, "
                        "grpc_cpp_plugin ${MOE_GRPC_CPP_PLUGIN}, prometheus-cpp ${prometheus-cpp_FOUND}, sqlite3 ${SQLite3_FOUND}, "
                        "absl ${absl_FOUND}, CLI11 ${CLI11_FOUND}, spdlog ${spdlog_FOUND}, openssl ${OpenSSL_FOUND}); run scripts/install-deps.sh")
  endif()
endif()

if(MOE_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    message(STATUS "moe: GoogleTest not found; tests are not built")
    set(MOE_TESTS OFF)
  endif()
endif()

# Adds our warning flags to a target.
function(moe_target_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${MOE_WARNINGS}>)
endfunction()
