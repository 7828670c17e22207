// The YAML/JSON parser (common/yaml.cc) on arbitrary text: it answers a Status or a tree, and a
// tree it returns writes back as JSON and YAML that parse again.
#include <cstdint>
#include <string_view>

#include "common/yaml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto doc = moe::ParseYaml(text);
  if (!doc.ok()) return 0;
  const std::string json = moe::ToJson(*doc, 2);
  auto again = moe::ParseYaml(json, moe::YamlLimits{0, 200, "json"});
  if (!again.ok() && doc->IsMap()) __builtin_trap();  // our own JSON of a mapping must read back
  (void)moe::ToYaml(*doc);
  return 0;
}
