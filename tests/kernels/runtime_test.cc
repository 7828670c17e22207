// kernels/runtime.h: the CUDA device facts the engine and the benchmarks use answer sensibly where
// no GPU can be used (a CPU machine, or a build without CUDA): no devices, a clear error for
// UseCudaDevice, and no pretend timings. On a machine with a GPU the GPU checks (tests/gpu/) cover
// them.
#include "kernels/runtime.h"

#include <gtest/gtest.h>

#include <string>

namespace moe {
namespace {

namespace k = kernels;

TEST(KernelRuntime, CudaFactsWhereNoGpuIsUsable) {
  std::string problem;
  if (k::HaveCuda() && k::CudaDeviceCount(&problem) > 0)
    GTEST_SKIP() << "a GPU is here: tests/gpu/ checks it";
  EXPECT_EQ(k::CudaDeviceCount(), 0);
  const Status st = k::UseCudaDevice(0);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("cuda:0"), std::string::npos) << st;
  if (!k::HaveCuda()) {
    EXPECT_TRUE(problem.empty()) << "a build without CUDA is not a broken driver: " << problem;
    EXPECT_NE(st.message().find("no CUDA in this build"), std::string::npos) << st;
    EXPECT_EQ(k::CudaSynchronize(), "no CUDA in this build");
    EXPECT_NE(k::CudaDeviceName(0).find("no CUDA in this build"), std::string::npos);
    EXPECT_EQ(k::MeasureCudaBf16GemmFlops(64, 1), 0.0);
  }
}

// cuBLAS is loaded on first use, not linked (its start-up cost every CPU rank paid): the loader
// must find it and the entry points used, which needs the toolkit, not a GPU.
TEST(KernelRuntime, CublasLoadsOnDemandWithTheEntryPointsTheGemmsUse) {
  if (!k::HaveCuda()) {
    EXPECT_EQ(k::CheckCublasLoads(), "no CUDA in this build");
    return;
  }
  EXPECT_EQ(k::CheckCublasLoads(), "");
}

TEST(KernelRuntime, ThreadsAndGemmBackendAreReported) {
  k::SetNumThreads(2);
  EXPECT_EQ(k::NumThreads(), 2);
  EXPECT_FALSE(k::CpuGemmBackendName().empty());
}

}  // namespace
}  // namespace moe
