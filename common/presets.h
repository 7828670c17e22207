// The built-in model presets (common/presets.cc).
#pragma once

#include <string>
#include <vector>

#include "common/job_spec_types.h"
#include "common/status.h"

namespace moe {

// Names of the built-in presets: tiny, small, deepseek-v3-671b, deepseek-v2-lite
// (common/presets.cc).
std::vector<std::string> ModelPresetNames();
StatusOr<ModelConfig> ModelPreset(const std::string& name);

}  // namespace moe
