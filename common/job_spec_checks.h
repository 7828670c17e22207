// The job spec's checks that are more than a comparison (the (spec).check and after_read functions
// proto/moe/v1/job_spec.proto names by name), each "(value, path) -> Status" with the path in its
// message. Defined in common/job_spec_checks.cc.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/job_spec_types.h"
#include "common/status.h"

namespace moe {

// A name as metadata.name allows it (1-63 of a-z, 0-9, '-', '.', '_', alphanumeric at both ends):
// it becomes part of paths, log files and Kubernetes labels. Queues and classes are named the same
// way.
Status ValidName(const std::string& s, const std::string& path);
// Empty (no class, the default queue) or a ValidName.
Status ValidNameOrEmpty(const std::string& s, const std::string& path);
// Within -1e9 .. 1e9: priorities are compared as they are, far from overflow wherever used.
Status ValidPriority(int64_t v, const std::string& path);
// Kubernetes' label syntax: a key is [prefix/]name (name: 1-63 of A-Z a-z 0-9 - _ ., alphanumeric
// at both ends; prefix: a DNS subdomain of at most 253); a value is empty or a name. At most 64.
Status ValidLabels(const std::map<std::string, std::string>& labels, const std::string& path);
Status AtMost64Dependencies(const std::vector<JobDependency>& deps, const std::string& path);
// `preset: tiny` fills in every model field; the fields after it in the table override.
Status ApplyPreset(ModelConfig* m);

}  // namespace moe
