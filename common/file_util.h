// Small file helpers with Status errors: whole-file reads, durable writes (temporary name, fsync,
// rename, fsync of the directory), directory listing and removal.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace moe {

StatusOr<std::string> ReadFileToString(const std::string& path);
// Writes `data` to path.tmp.<pid>, fsyncs it, renames it over `path` and fsyncs the directory: a
// reader sees the old file or the new one, never a mix, even across a crash.
Status WriteFileAtomic(const std::string& path, std::string_view data);
Status FsyncPath(const std::string& path);  // a file or a directory
Status MakeDirs(const std::string& path);
StatusOr<std::vector<std::string>> ListDir(const std::string& path);  // names, sorted; no . or ..
Status RemoveAll(const std::string& path);
bool PathExists(const std::string& path);
std::string DirName(const std::string& path);
// The last component of `path` ("b" of "/a/b").
std::string BaseName(const std::string& path);
std::string JoinPath(const std::string& a, const std::string& b);

// CRC-32 (IEEE 802.3, the zlib one), for checkpoint integrity.
uint32_t Crc32(const void* data, size_t size, uint32_t crc = 0);

}  // namespace moe
