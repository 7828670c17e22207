// The job spec described once (common/schema.h): one table per struct of common/job_spec.h, in
// common/job_spec_schema.cc. The reader, the writer, the per-field checks and the comparison with
// the protobuf form (moe.v1.TrainingJob, tests/common/job_spec_schema_test.cc) all walk these
// tables.
//
// Adding a field: a member in common/job_spec.h, a Field(...) line in its table, the same name in
// proto/moe/v1/job.proto (`optional` on scalars), and any rule that spans fields in
// ValidateJobSpec.
#pragma once

#include "common/job_spec_types.h"
#include "common/schema.h"

namespace moe {

template <>
const Schema<ScheduleSegment>& SchemaOf<ScheduleSegment>();
template <>
const Schema<AttentionConfig>& SchemaOf<AttentionConfig>();
template <>
const Schema<RopeScalingConfig>& SchemaOf<RopeScalingConfig>();
template <>
const Schema<BatchRampConfig>& SchemaOf<BatchRampConfig>();
template <>
const Schema<MoeConfig>& SchemaOf<MoeConfig>();
template <>
const Schema<ModelConfig>& SchemaOf<ModelConfig>();
template <>
const Schema<ParallelismConfig>& SchemaOf<ParallelismConfig>();
template <>
const Schema<PlacementConfig>& SchemaOf<PlacementConfig>();
template <>
const Schema<DataConfig>& SchemaOf<DataConfig>();
template <>
const Schema<OptimizerConfig>& SchemaOf<OptimizerConfig>();
template <>
const Schema<TrainingConfig>& SchemaOf<TrainingConfig>();
template <>
const Schema<CheckpointConfig>& SchemaOf<CheckpointConfig>();
template <>
const Schema<ResourcesConfig>& SchemaOf<ResourcesConfig>();
// The whole document: apiVersion, kind, metadata: {...}, spec: {...}.
template <>
const Schema<ElasticConfig>& SchemaOf<ElasticConfig>();
template <>
const Schema<JobDependency>& SchemaOf<JobDependency>();
template <>
const Schema<JobSpec>& SchemaOf<JobSpec>();

// A name as metadata.name allows it (1-63 of a-z, 0-9, '-', '.', '_', alphanumeric at both ends):
// it becomes part of paths, log files and Kubernetes labels. Queues and classes are named the same
// way.
Status ValidName(const std::string& s, const std::string& path);

}  // namespace moe
