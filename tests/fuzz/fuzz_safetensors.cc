// The safetensors reader (worker/engine/checkpoint/safetensors.cc) on an arbitrary file: header,
// offsets and dtypes are checked before any tensor is read.
#include <cstdint>

#include "tests/fuzz/fuzz_util.h"
#include "worker/engine/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = moe::fuzz::ScratchDir() + "/model.safetensors";
  moe::fuzz::WriteFile(path, std::string_view(reinterpret_cast<const char*>(data), size));
  auto f = moe::checkpoint::SafetensorsFile::Open(path);
  (void)f;
  return 0;
}
