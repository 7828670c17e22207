// A job document as moectl and the controller read it: text -> TrainingJob (protobuf's JSON parser)
// -> validated JobSpec -> the expanded proto; and moe-train's direct path (ParseJobSpecText).
#include <cstdint>
#include <string>

#include "common/job_spec.h"
#include "common/job_spec_proto.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (auto job = moe::TrainingJobFromText(text); job.ok()) {
    if (auto spec = moe::SpecFromProto(*job); spec.ok()) {
      const moe::v1::TrainingJob expanded = moe::SpecToProto(*spec);
      if (!moe::SpecFromProto(expanded).ok())
        __builtin_trap();  // an expanded valid spec stays valid
    }
  }
  (void)moe::ParseJobSpecText(text);
  return 0;
}
