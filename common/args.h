// Command-line flags for the engine's tools (moe-train, moe-prep, benchmarks), which build without
// CLI11 (docs/architecture.md, "Layers": the engine needs nothing but a compiler). Accepts --name
// value and --name=value; errors name the flag; --help prints the usage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe {

class ArgParser {
 public:
  ArgParser(std::string program, std::string description);

  void AddString(const std::string& name, std::string* out, const std::string& help);
  void AddInt(const std::string& name, int64_t* out, const std::string& help);
  void AddDouble(const std::string& name, double* out, const std::string& help);
  void AddFlag(const std::string& name, bool* out, const std::string& help);
  void AddStrings(const std::string& name, std::vector<std::string>* out, const std::string& help);
  void Require(const std::string& name);

  // Returns INVALID_ARGUMENT naming the flag. Sets help_requested() on --help/-h (and returns OK).
  Status Parse(int argc, char** argv);
  bool help_requested() const { return help_; }
  bool Given(const std::string& name) const;
  std::string Usage() const;

 private:
  enum class Type { kString, kInt, kDouble, kFlag, kStrings };
  struct Flag {
    std::string name;
    Type type;
    void* out;
    std::string help;
    bool required = false;
    bool given = false;
  };
  Flag* Find(const std::string& name);
  std::string program_, description_;
  std::vector<Flag> flags_;
  bool help_ = false;
};

}  // namespace moe
