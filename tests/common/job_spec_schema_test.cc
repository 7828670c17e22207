// The job spec's tables against its protobuf form (moe.v1.TrainingJob): the same fields, both ways,
// with compatible types and presence. Both come from moe/v1/job_spec.proto (the tables through
// proto/gen_job_spec.py), so this checks the generator: a field it dropped, mistyped or gave the
// wrong presence fails here and not in a user's submit. Then the proto <-> spec path end to end.
#include "common/job_spec_schema.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <gtest/gtest.h>

#include <deque>
#include <functional>

#include "common/job_spec.h"
#include "common/job_spec_proto.h"

namespace moe {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using K = TypeInfo::Kind;

// ---------------------------------------------------------------------------------------------------
// The comparison. Every mismatch is one line naming the document path.

using Mismatches = std::vector<std::string>;
void CompareMessage(const SchemaInfo& schema, const Descriptor& message, const std::string& path,
                    Mismatches* out);

bool ScalarMatches(K kind, const FieldDescriptor& f) {
  switch (kind) {
    case K::kInt64:
      return f.cpp_type() == FieldDescriptor::CPPTYPE_INT64;
    case K::kUint64:
      return f.cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
    case K::kDouble:
      return f.cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE;
    case K::kBool:
      return f.cpp_type() == FieldDescriptor::CPPTYPE_BOOL;
    case K::kString:
      return f.type() == FieldDescriptor::TYPE_STRING;
    default:
      return false;
  }
}

// One value's type: `element` when comparing a list's elements with a repeated field.
void CompareValue(const TypeInfo& type, const FieldDescriptor& f, const std::string& path,
                  Mismatches* out) {
  if (type.kind == K::kList) {
    out->push_back(
        path +
        ": a list of lists has no proto mapping here yet (wrap the inner list in a message)");
  } else if (type.kind == K::kStruct) {
    if (f.cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      out->push_back(path + ": a struct in the schema, " + std::string(f.type_name()) +
                     " in the proto");
    } else {
      CompareMessage(*type.fields, *f.message_type(), path, out);
    }
  } else if (!ScalarMatches(type.kind, f)) {
    out->push_back(path + ": " + std::string(TypeKindName(type.kind)) + " in the schema, " +
                   std::string(f.type_name()) + " in the proto");
  }
}

void CompareField(const FieldInfo& field, const FieldDescriptor& f, const std::string& path,
                  Mismatches* out) {
  const TypeInfo& type = *field.type;
  if ((type.kind == K::kMap) != f.is_map()) {
    out->push_back(path + (f.is_map() ? ": a map in the proto, not in the schema"
                                      : ": a map in the schema, not in the proto"));
    return;
  }
  if (type.kind == K::kMap) {  // string keys both sides; an empty map is the absent one
    const FieldDescriptor* key = f.message_type()->map_key();
    if (key->type() != FieldDescriptor::TYPE_STRING)
      out->push_back(path + ": the proto map's keys are not strings");
    CompareValue(*type.element, *f.message_type()->map_value(), path + "{}", out);
    return;
  }
  if ((type.kind == K::kList) != f.is_repeated()) {
    out->push_back(path + (f.is_repeated() ? ": repeated in the proto, not a list in the schema"
                                           : ": a list in the schema, not repeated in the proto"));
    return;
  }
  if (type.kind == K::kList) {
    // A repeated field cannot tell an empty list from an absent one: the reader would put the
    // default back.
    if (field.optional || !field.empty_default) {
      out->push_back(
          path + ": a list that is optional or has a non-empty default cannot be a repeated field");
    }
    CompareValue(*type.element, f, path + "[]", out);
    return;
  }
  // Scalars need presence, so that "top_k: 0" reaches the validator instead of the default.
  if (type.kind != K::kStruct && !f.has_presence()) {
    out->push_back(path + ": needs `optional` in the proto");
  }
  CompareValue(type, f, path, out);
}

void CompareMessage(const SchemaInfo& schema, const Descriptor& message, const std::string& path,
                    Mismatches* out) {
  auto join = [&](const std::string& key) { return path.empty() ? key : path + "." + key; };
  for (const FieldInfo& field : schema.fields) {
    const FieldDescriptor* match = nullptr;
    for (int i = 0; i < message.field_count(); ++i) {
      if (DocumentKey(*message.field(i)) == field.name) match = message.field(i);
    }
    if (match == nullptr) {
      out->push_back(join(field.name) + ": in the schema, not in proto message " +
                     message.full_name());
    } else {
      CompareField(field, *match, join(field.name), out);
    }
  }
  for (int i = 0; i < message.field_count(); ++i) {
    const std::string key = DocumentKey(*message.field(i));
    if (schema.Find(key) == nullptr) {
      out->push_back(join(key) + ": in proto message " + message.full_name() +
                     ", not in the schema");
    }
  }
}

Mismatches Compare(const SchemaInfo& schema, const Descriptor& message) {
  Mismatches out;
  CompareMessage(schema, message, "", &out);
  return out;
}

std::string Lines(const Mismatches& m) {
  std::string s;
  for (const auto& line : m) s += line + "\n";
  return s;
}

// The files `file` imports (moe/v1/options.proto, and descriptor.proto under it), built into `pool`
// first: a pool builds a file only once its imports are there.
void BuildImports(google::protobuf::DescriptorPool& pool,
                  const google::protobuf::FileDescriptor& file) {
  for (int i = 0; i < file.dependency_count(); ++i) {
    const google::protobuf::FileDescriptor& dep = *file.dependency(i);
    if (pool.FindFileByName(dep.name()) != nullptr) continue;
    BuildImports(pool, dep);
    google::protobuf::FileDescriptorProto proto;
    dep.CopyTo(&proto);
    ASSERT_NE(pool.BuildFile(proto), nullptr) << dep.name();
  }
}

TEST(JobSpecSchema, MatchesTheProtoBothWays) {
  const Mismatches m = Compare(SchemaOf<JobSpec>().info(), *moe::v1::TrainingJob::descriptor());
  EXPECT_TRUE(m.empty()) << Lines(m);
}

// ---------------------------------------------------------------------------------------------------
// The comparison must fail when the two drift. Edited copies of the schema's description:

class EditedSchema {
 public:
  // A copy of `root` in which the description at `path` (struct names, e.g. {"spec", "model",
  // "moe"}) is edited by `edit`; the rest is shared.
  const SchemaInfo& Edit(const SchemaInfo& root, std::vector<std::string> path,
                         const std::function<void(SchemaInfo&)>& edit) {
    SchemaInfo& copy = infos_.emplace_back(root);
    if (path.empty()) {
      edit(copy);
      return copy;
    }
    for (FieldInfo& f : copy.fields) {
      if (f.name != path.front()) continue;
      const SchemaInfo& inner = Edit(*f.type->fields, {path.begin() + 1, path.end()}, edit);
      f.type = &types_.emplace_back(TypeInfo{K::kStruct, nullptr, &inner});
    }
    return copy;
  }
  const TypeInfo* Type(TypeInfo t) { return &types_.emplace_back(t); }

 private:
  std::deque<SchemaInfo> infos_;
  std::deque<TypeInfo> types_;
};

bool Mentions(const Mismatches& m, const std::string& text) {
  for (const auto& line : m) {
    if (line.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(JobSpecSchema, FailsWhenTheSchemaHasAFieldTheProtoLacks) {
  EditedSchema e;
  const SchemaInfo& edited =
      e.Edit(SchemaOf<JobSpec>().info(), {"spec", "model", "moe"}, [&](SchemaInfo& s) {
        s.fields.push_back(FieldInfo{"capacity_factor", &Codec<double>::Type()});
      });
  const Mismatches m = Compare(edited, *moe::v1::TrainingJob::descriptor());
  ASSERT_EQ(m.size(), 1u) << Lines(m);
  EXPECT_EQ(m[0],
            "spec.model.moe.capacity_factor: in the schema, not in proto message moe.v1.MoeSpec");
}

TEST(JobSpecSchema, FailsWhenTheProtoHasAFieldTheSchemaLacks) {
  EditedSchema e;
  const SchemaInfo& edited =
      e.Edit(SchemaOf<JobSpec>().info(), {"spec", "training"}, [&](SchemaInfo& s) {
        std::erase_if(s.fields, [](const FieldInfo& f) { return f.name == "seed"; });
      });
  const Mismatches m = Compare(edited, *moe::v1::TrainingJob::descriptor());
  ASSERT_EQ(m.size(), 1u) << Lines(m);
  EXPECT_EQ(m[0], "spec.training.seed: in proto message moe.v1.TrainingSpec, not in the schema");
}

TEST(JobSpecSchema, FailsOnTypesListsAndPresence) {
  EditedSchema e;
  const SchemaInfo& edited =
      e.Edit(SchemaOf<JobSpec>().info(), {"spec", "data"}, [&](SchemaInfo& s) {
        for (FieldInfo& f : s.fields) {
          if (f.name == "seq_length") f.type = &Codec<double>::Type();  // int64 in the proto
          if (f.name == "path") {
            f.type = &Codec<std::vector<std::string>>::Type();  // not repeated there
          }
        }
      });
  Mismatches m = Compare(edited, *moe::v1::TrainingJob::descriptor());
  EXPECT_TRUE(Mentions(m, "spec.data.seq_length: double in the schema, int64 in the proto"))
      << Lines(m);
  EXPECT_TRUE(Mentions(m, "spec.data.path: a list in the schema, not repeated in the proto"))
      << Lines(m);
  EXPECT_EQ(m.size(), 2u) << Lines(m);

  // The other direction needs a proto that drifted: a copy of job.proto with edits, in its own
  // pool.
  google::protobuf::FileDescriptorProto file;
  moe::v1::TrainingJob::descriptor()->file()->CopyTo(&file);
  for (auto& msg : *file.mutable_message_type()) {
    if (msg.name() == "TrainingSpec") {
      auto* extra =
          msg.add_field();  // no `optional`: an explicit 0 would vanish in the JSON mapping
      extra->set_name("accumulate");
      extra->set_number(100);
      extra->set_type(google::protobuf::FieldDescriptorProto::TYPE_INT64);
      extra->set_label(google::protobuf::FieldDescriptorProto::LABEL_OPTIONAL);
    }
    if (msg.name() == "MoeSpec") {
      for (auto& f : *msg.mutable_field()) {
        if (f.name() == "top_k") f.set_type(google::protobuf::FieldDescriptorProto::TYPE_STRING);
      }
    }
  }
  google::protobuf::DescriptorPool pool;
  BuildImports(pool, *moe::v1::TrainingJob::descriptor()->file());
  ASSERT_NE(pool.BuildFile(file), nullptr);
  const Descriptor* drifted = pool.FindMessageTypeByName("moe.v1.TrainingJob");
  const SchemaInfo& with_accumulate =
      e.Edit(SchemaOf<JobSpec>().info(), {"spec", "training"}, [&](SchemaInfo& s) {
        s.fields.push_back(FieldInfo{"accumulate", &Codec<int64_t>::Type()});
      });
  m = Compare(with_accumulate, *drifted);
  EXPECT_TRUE(Mentions(m, "spec.training.accumulate: needs `optional` in the proto")) << Lines(m);
  EXPECT_TRUE(Mentions(m, "spec.model.moe.top_k: int64 in the schema, string in the proto"))
      << Lines(m);
  EXPECT_EQ(m.size(), 2u) << Lines(m);
  // And the unedited schema against the drifted proto: the field it lacks.
  EXPECT_TRUE(Mentions(
      Compare(SchemaOf<JobSpec>().info(), *drifted),
      "spec.training.accumulate: in proto message moe.v1.TrainingSpec, not in the schema"));
}

TEST(JobSpecSchema, ListsNeedAnEmptyDefaultToBeRepeated) {
  google::protobuf::FileDescriptorProto file;
  moe::v1::TrainingJob::descriptor()->file()->CopyTo(&file);
  for (auto& msg : *file.mutable_message_type()) {
    if (msg.name() != "TrainingSpec") continue;
    auto* frozen = msg.add_field();
    frozen->set_name("frozen_layers");
    frozen->set_number(100);
    frozen->set_type(google::protobuf::FieldDescriptorProto::TYPE_STRING);
    frozen->set_label(google::protobuf::FieldDescriptorProto::LABEL_REPEATED);
  }
  google::protobuf::DescriptorPool pool;
  BuildImports(pool, *moe::v1::TrainingJob::descriptor()->file());
  ASSERT_NE(pool.BuildFile(file), nullptr);
  const Descriptor* proto = pool.FindMessageTypeByName("moe.v1.TrainingJob");
  for (bool empty_default : {true, false}) {
    EditedSchema e;
    const SchemaInfo& edited =
        e.Edit(SchemaOf<JobSpec>().info(), {"spec", "training"}, [&](SchemaInfo& s) {
          s.fields.push_back(FieldInfo{"frozen_layers", &Codec<std::vector<std::string>>::Type(),
                                       false, empty_default});
        });
    const Mismatches m = Compare(edited, *proto);
    if (empty_default) {
      EXPECT_TRUE(m.empty()) << Lines(m);
    } else {
      ASSERT_EQ(m.size(), 1u) << Lines(m);
      EXPECT_EQ(m[0],
                "spec.training.frozen_layers: a list that is optional or has a non-empty default "
                "cannot be a repeated field");
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// The proto <-> spec path.

JobSpec Spec(const std::string& preset) {
  JobSpec s;
  s.name = "round-trip";
  s.model = *ModelPreset(preset);
  s.data.path = "data/fortunes";
  s.checkpoint.dir = "/tmp/ckpt";
  s.training.seed = 18446744073709551615u;
  s.optimizer.lr = 0.1;
  s.optimizer.min_lr = 0.01;
  return s;
}

TEST(JobSpecProto, EveryPresetSurvivesTheProto) {
  for (const std::string& preset : ModelPresetNames()) {
    const JobSpec spec = Spec(preset);
    ASSERT_TRUE(ValidateJobSpec(spec).ok()) << preset << ": " << ValidateJobSpec(spec);
    const moe::v1::TrainingJob proto = SpecToProto(spec);
    EXPECT_EQ(proto.api_version(), "moe/v1");
    EXPECT_TRUE(proto.spec().model().moe().has_top_k());
    auto again = SpecFromProto(proto);
    ASSERT_TRUE(again.ok()) << preset << ": " << again.status();
    EXPECT_EQ(*again, spec) << preset;
  }
}

// A field is one line of moe/v1/job_spec.proto: metadata.comment was added as exactly that, and it
// is read, checked, written, sent and read back like every other field.
TEST(JobSpecProto, AFieldIsALineOfTheProto) {
  auto job = CheckedTrainingJob(
      "apiVersion: moe/v1\nkind: TrainingJob\nmetadata: {name: a, comment: 'ablation, ticket "
      "123'}\n"
      "spec: {model: {preset: tiny}, data: {source: synthetic}}\n");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->metadata().comment(), "ablation, ticket 123") << "in the wire form moectl sends";
  EXPECT_TRUE(job->spec().model().moe().has_top_k()) << "sent as checked: every default filled in";
  auto spec = SpecFromProto(*job);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->comment, "ablation, ticket 123");
  EXPECT_EQ(SpecToProto(*spec).metadata().comment(), "ablation, ticket 123");
  auto bad = CheckedTrainingJob("apiVersion: moe/v1\nmetadata: {name: a, coment: x}\nspec: {}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("did you mean 'comment'"), std::string::npos)
      << bad.status();
  // moectl checks what the controller will: a cross-field rule refuses before anything is sent.
  auto refused = CheckedTrainingJob(
      "apiVersion: moe/v1\nmetadata: {name: a}\n"
      "spec: {model: {preset: tiny}, data: {source: synthetic}, parallelism: {world_size: 3, "
      "expert_parallel: 2}}\n");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("spec.parallelism"), std::string::npos)
      << refused.status();
}

TEST(JobSpecProto, DocumentKeysAndPresenceSurvive) {
  auto job = TrainingJobFromText(
      "apiVersion: moe/v2\nkind: TrainingJob\nmetadata: {name: a}\nspec: {data: {path: p}}\n");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->api_version(), "moe/v2");
  EXPECT_EQ(
      ToJson(MessageToNode(*job)),
      R"({"apiVersion":"moe/v2","kind":"TrainingJob","metadata":{"name":"a"},"spec":{"data":{"path":"p"}}})");
  EXPECT_EQ(SpecFromProto(*job).status().message(), "apiVersion: must be moe/v1, got 'moe/v2'");

  job->set_api_version("moe/v1");
  job->mutable_spec()->mutable_model()->set_preset("tiny");
  ASSERT_TRUE(SpecFromProto(*job).ok()) << SpecFromProto(*job).status();
  // An explicit 0 is not the default: the validator sees it.
  job->mutable_spec()->mutable_model()->mutable_moe()->set_top_k(0);
  EXPECT_EQ(SpecFromProto(*job).status().message(), "spec.model.moe.top_k: must be > 0, got 0");

  auto unknown = TrainingJobFromText("apiVersion: moe/v1\nspec: {model: {moe: {topk: 2}}}\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("topk"), std::string::npos) << unknown.status();
}

}  // namespace
}  // namespace moe
