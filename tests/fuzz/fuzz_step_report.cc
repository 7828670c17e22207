// A rank's JSON step report as the worker agent reads it from the rank's pipe
// (worker/agent/step_report.cc).
#include <cstdint>
#include <string>

#include "worker/agent/step_report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moe::v1::StepMetrics m;
  (void)moe::worker::StepMetricsFromJson(std::string(reinterpret_cast<const char*>(data), size),
                                         &m);
  return 0;
}
