// Helpers for the libFuzzer targets (tests/fuzz, docs/operations.md "Fuzzing"): inputs that are
// files (the dataset, checkpoints, safetensors, the tokens file) are written to a scratch directory
// made once per process and reused by every input.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace moe::fuzz {

// Removed when the process exits normally (a crash leaves it, with the input that crashed).
inline const std::string& ScratchDir() {
  static char path[] = "/tmp/moe-fuzz.XXXXXX";  // plain chars: still there when atexit runs
  static const std::string dir = [] {
    if (::mkdtemp(path) == nullptr) std::abort();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    });
    return std::string(path);
  }();
  return dir;
}

inline void WriteFile(const std::string& path, std::string_view bytes, mode_t mode = 0600) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  ::chmod(path.c_str(), mode);
}

// Splits an input into two parts at a position its first two bytes choose (the second part may be
// empty).
inline std::pair<std::string_view, std::string_view> Split(const uint8_t* data, size_t size) {
  if (size < 2) return {std::string_view(reinterpret_cast<const char*>(data), size), {}};
  const size_t at = (static_cast<size_t>(data[0]) << 8 | data[1]) % (size - 1);
  std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  return {rest.substr(0, at), rest.substr(std::min(at, rest.size()))};
}

}  // namespace moe::fuzz
