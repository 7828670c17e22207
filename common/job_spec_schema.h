// The job spec's field tables (common/schema.h): one per struct of common/job_spec_types.h. The
// reader, the writer, the per-field checks and the protobuf form's conversions all walk them.
// Both the structs and these tables are generated from proto/moe/v1/job_spec.proto
// (proto/gen_job_spec.py, at build time: job_spec_tables.gen.cc in the build tree).
//
// Adding a field: a line in proto/moe/v1/job_spec.proto (`optional` on scalars; its default and
// checks in its (spec) option), and any rule that spans fields in ValidateJobSpec.
#pragma once

#include "common/job_spec_checks.h"
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
template <>
const Schema<ElasticConfig>& SchemaOf<ElasticConfig>();
template <>
const Schema<JobDependency>& SchemaOf<JobDependency>();
// The whole document: apiVersion, kind, metadata: {...}, spec: {...}.
template <>
const Schema<JobSpec>& SchemaOf<JobSpec>();

}  // namespace moe
