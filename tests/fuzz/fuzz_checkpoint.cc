// A checkpoint directory as a resume reads it (worker/engine/checkpoint/checkpoint_io.cc): an
// arbitrary manifest beside an arbitrary shard file, opened with and without verifying checksums.
#include <cstdint>

#include "tests/fuzz/fuzz_util.h"
#include "worker/engine/checkpoint/checkpoint_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [manifest, shard] = moe::fuzz::Split(data, size);
  const std::string dir = moe::fuzz::ScratchDir() + "/ckpt";
  ::mkdir(dir.c_str(), 0700);
  moe::fuzz::WriteFile(dir + "/MANIFEST.json", manifest);
  moe::fuzz::WriteFile(dir + "/shard_00000.bin", shard);
  (void)moe::checkpoint::ReadCheckpointManifest(dir);
  for (bool verify : {false, true}) (void)moe::checkpoint::CheckpointReader::Open(dir, verify);
  return 0;
}
