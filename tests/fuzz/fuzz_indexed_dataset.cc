// The indexed dataset's reader (worker/engine/data/indexed_dataset.cc): an arbitrary .idx beside an
// arbitrary .bin; what opens must read every token in range.
#include <cstdint>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "worker/engine/data/indexed_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [idx, bin] = moe::fuzz::Split(data, size);
  const std::string prefix = moe::fuzz::ScratchDir() + "/ds";
  moe::fuzz::WriteFile(prefix + ".idx", idx);
  moe::fuzz::WriteFile(prefix + ".bin", bin);
  auto ds = moe::data::IndexedDataset::Open(prefix, 0);
  if (!ds.ok()) return 0;
  const int64_t n = std::min<int64_t>((*ds)->num_tokens(), 4096);
  std::vector<int32_t> out(static_cast<size_t>(n));
  if (n > 0) (*ds)->Read(0, n, out.data());
  for (int64_t d = 0; d <= (*ds)->num_documents() && d < 64; ++d)
    (void)(*ds)->DocumentTokenBegin(d);
  return 0;
}
