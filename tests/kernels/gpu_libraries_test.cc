// The GPU libraries a build carries (kernels/gpu_libraries.h), on any machine: in a CUDA build with
// the header libraries, the cuDNN frontend and CUTLASS are named with their versions and folders,
// and cuDNN's SDPA graphs for MLA and MHA pass the frontend's host checks for sm_90 (no GPU needed)
// while shapes cuDNN cannot take do not. Where cuDNN's runtime is absent the graph checks are
// skipped, loudly.
#include "kernels/gpu_libraries.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#ifdef MOE_WITH_SM90A
#include "kernels/cuda/sm90a/cudnn_attention.h"
#endif

namespace moe::kernels {
namespace {

const GpuLibrary* Named(const std::vector<GpuLibrary>& all, const std::string& name) {
  for (const auto& l : all)
    if (l.name == name) return &l;
  return nullptr;
}

TEST(GpuLibraries, EveryLibraryHasALine) {
  const auto all = GpuLibraries();
  for (const char* name : {"cudnn-frontend", "cutlass", "cudnn", "cublas", "cuda-runtime"}) {
    const GpuLibrary* l = Named(all, name);
    ASSERT_NE(l, nullptr) << name;
    EXPECT_FALSE(l->origin.empty()) << name << " says where it came from, or why not";
  }
  const std::string text = FormatGpuLibraries(all);
  EXPECT_NE(text.find("cudnn-frontend "), std::string::npos) << text;
}

#ifdef MOE_WITH_SM90A
TEST(GpuLibraries, TheHeaderLibrariesCarryTheirVersionsAndFolders) {
  const auto all = GpuLibraries();
  for (const char* name : {"cudnn-frontend", "cutlass"}) {
    const GpuLibrary* l = Named(all, name);
    ASSERT_NE(l, nullptr);
    EXPECT_THAT(l->version, ::testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+")) << name;
    EXPECT_EQ(l->origin.rfind("headers, /", 0), 0u) << name << ": " << l->origin;
  }
}

TEST(GpuLibraries, CudnnSdpaGraphsValidateOnTheHost) {
  namespace s9 = cuda::sm90a;
  if (!s9::LoadCudnn().found) GTEST_SKIP() << "NO cuDNN RUNTIME HERE: " << s9::LoadCudnn().why;
  EXPECT_EQ(s9::ValidateSdpaGraphs({2, 128, 4096, 192, 128, true}), "") << "MLA, DeepSeek-V3 width";
  EXPECT_EQ(s9::ValidateSdpaGraphs({1, 16, 512, 128, 128, true}), "") << "plain MHA";
  EXPECT_EQ(s9::ValidateSdpaGraphs({1, 16, 512, 128, 128, false}), "") << "not causal";
  // What cuDNN refuses on Hopper, named by the frontend (the attention path then falls back).
  EXPECT_NE(s9::ValidateSdpaGraphs({1, 16, 512, 130, 128, true}).find("multiple of 8"),
            std::string::npos);
  EXPECT_NE(s9::ValidateSdpaGraphs({1, 16, 512, 1024, 128, true}).find("less than or equal to 256"),
            std::string::npos)
      << "the backward's head dim limit";
}
#endif

}  // namespace
}  // namespace moe::kernels
