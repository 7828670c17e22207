// The training job specification's types (the YAML of docs/job-spec.md): plain structs with their
// defaults, below everything that reads, writes or checks them (common/job_spec.h: parsing and
// validation; common/job_spec_schema.h: each struct's table of fields; common/presets.h: the model
// presets).
//
// The structs and their tables are generated at build time from the spec's one definition,
// proto/moe/v1/job_spec.proto (proto/gen_job_spec.py writes job_spec_structs.gen.h and
// job_spec_tables.gen.cc into the build tree): a field is a line there. Their hand-written members
// (head_dim(), Distributed(), ...) are in common/job_spec_methods.inc.
#pragma once

#include <cstdint>
#include <vector>

#include "common/job_spec_structs.gen.h"

namespace moe {

// A piecewise schedule of a value by tokens trained (the learning rate, the bias update rate gamma,
// the MTP loss weight lambda).
using Schedule = std::vector<ScheduleSegment>;
// The schedule's value after `tokens` trained tokens (within a segment, linear/cosine by the share
// of the segment done). An empty schedule is `fallback`.
double ScheduleValue(const Schedule& s, double tokens, double fallback);

}  // namespace moe
