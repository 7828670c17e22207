#include "common/job_spec_checks.h"

#include <cctype>
#include <string_view>

#include "common/presets.h"

namespace moe {
namespace {

bool IsLowerAlnum(char c) {
  return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c));
}

bool IsLabelName(std::string_view s) {
  const auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (s.empty() || s.size() > 63 || !alnum(s.front()) || !alnum(s.back())) return false;
  for (char c : s) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace

Status ValidPriority(int64_t v, const std::string& path) {
  if (v >= -1000000000 && v <= 1000000000) return OkStatus();
  return InvalidArgumentError(path + ": must be in -1000000000 .. 1000000000, got " +
                              std::to_string(v));
}

Status ValidLabels(const std::map<std::string, std::string>& labels, const std::string& path) {
  if (labels.size() > 64)
    return InvalidArgumentError(path + ": at most 64 labels, got " + std::to_string(labels.size()));
  for (const auto& [key, value] : labels) {
    const size_t slash = key.find('/');
    const std::string_view prefix =
        slash == std::string::npos ? "" : std::string_view(key).substr(0, slash);
    const std::string_view name = slash == std::string::npos
                                      ? std::string_view(key)
                                      : std::string_view(key).substr(slash + 1);
    const bool prefix_ok = slash == std::string::npos ||
                           (!prefix.empty() && prefix.size() <= 253 && IsLabelName(prefix));
    if (!prefix_ok || !IsLabelName(name)) {
      return InvalidArgumentError(path + ": key '" + key +
                                  "' must be [prefix/]name, the name 1-63 characters of a-z, A-Z, "
                                  "0-9, '-', '_', '.', starting and ending alphanumeric");
    }
    if (!value.empty() && !IsLabelName(value)) {
      return InvalidArgumentError(path + "." + key + ": '" + value +
                                  "' must be empty or 1-63 characters of a-z, A-Z, 0-9, "
                                  "'-', '_', '.', starting and ending alphanumeric");
    }
  }
  return OkStatus();
}

Status ApplyPreset(ModelConfig* m) {
  if (m->preset.empty()) return OkStatus();
  MOE_ASSIGN_OR_RETURN(*m, ModelPreset(m->preset));
  return OkStatus();
}

Status ValidName(const std::string& s, const std::string& path) {
  bool ok = !s.empty() && s.size() <= 63 && IsLowerAlnum(s.front()) && IsLowerAlnum(s.back());
  for (char c : s) ok = ok && (IsLowerAlnum(c) || c == '-' || c == '.' || c == '_');
  if (ok) return OkStatus();
  return InvalidArgumentError(
      path + ": '" + s +
      "' must be 1-63 characters of a-z, 0-9, '-', '.', '_', starting and ending alphanumeric");
}

Status ValidNameOrEmpty(const std::string& s, const std::string& path) {
  return s.empty() ? OkStatus() : ValidName(s, path);
}

Status AtMost64Dependencies(const std::vector<JobDependency>& deps, const std::string& path) {
  if (deps.size() <= 64) return OkStatus();
  return InvalidArgumentError(path + ": at most 64 dependencies, got " +
                              std::to_string(deps.size()));
}

}  // namespace moe
