// cuBLAS, loaded when a CUDA tensor first needs it (dlopen), not linked: libcublasLt's static
// initialisers cost about 0.45 s at every process start, which every CPU rank paid for nothing
// (submit -> first step; docs/benchmarks.md). The entry points used are resolved once.
#pragma once

#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

namespace moe::kernels::cuda {

struct CublasApi {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  // The C entry point (cublas_api.h also declares a C++ overload taking cudaDataType as the compute
  // type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  // Optional (cuBLAS 12.5 and later): null when the library lacks it, and the grouped GEMMs loop.
  decltype(&cublasGemmGroupedBatchedEx) grouped_gemm = nullptr;
};

// Opens a toolkit library (libcublas.so.13, libcublasLt.so.13) from the directory libcudart was
// loaded from, else from each folder of $MOE_CUDA_LIB_DIRS (':'-separated; the GPU check names the
// Python environment's NVIDIA wheels there), else by name on the library path; *tried says where
// it looked. nullptr: dlerror() says why.
void* OpenToolkitLibrary(const std::string& name, std::string* tried);
// *out = the library's `symbol`; a missing one sets *problem ("<library> has no <symbol>") if it is
// still empty.
template <typename F>
void ResolveSymbol(void* lib, const char* library, const char* symbol, F* out,
                   std::string* problem) {
  *out = reinterpret_cast<F>(dlsym(lib, symbol));
  if (*out == nullptr && problem->empty()) *problem = std::string(library) + " has no " + symbol;
}

// Loads libcublas.so.<major> (the toolkit's, found beside libcudart or on the library path) on
// first use; a missing library stops the process with a message naming it.
const CublasApi& Cublas();

}  // namespace moe::kernels::cuda
