// The controller's bearer-token file (controller/auth.cc), mode 0600 as it requires, then a check
// of a header built from the same bytes.
#include <cstdint>
#include <string>

#include "controller/auth.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [file, header] = moe::fuzz::Split(data, size);
  const std::string path = moe::fuzz::ScratchDir() + "/tokens";
  moe::fuzz::WriteFile(path, file);
  auto auth = moe::controller::TokenAuth::Load(path);
  if (auth.ok()) (void)auth->Check(std::string(header), moe::controller::Role::kViewer);
  return 0;
}
