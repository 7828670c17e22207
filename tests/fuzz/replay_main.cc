// The fuzz targets' inputs replayed without libFuzzer: the ASan + UBSan build (g++, where libFuzzer
// does not exist) links each target with this driver, and ctest runs it over the target's seed
// corpus and regression inputs (fuzz_replay_<target>, label unit; scripts/sanitize.sh runs them).
// Finding new inputs stays with `make fuzz` (clang, libFuzzer); this keeps every input ever saved
// clean on each CI run.
//   <target> PATH...   each PATH a file or a directory of files (not recursive); exit 0 when every
//                      input ran, 1 when a path cannot be read, a sanitizer's abort otherwise.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool ListInputs(const std::string& path, std::vector<std::string>& out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  if (!S_ISDIR(st.st_mode)) {
    out.push_back(path);
    return true;
  }
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return false;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(path + "/" + name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());  // the same order on every run
  out.insert(out.end(), names.begin(), names.end());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    if (!ListInputs(argv[i], inputs)) {
      std::fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[i]);
      return 1;
    }
  }
  for (const std::string& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "%s: cannot read %s\n", argv[0], path.c_str());
      return 1;
    }
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%s: %zu input(s) replayed clean\n", argv[0], inputs.size());
  return 0;
}
