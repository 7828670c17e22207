// The controller: submit, placement and running a job, admission (checkpoint directories, memory,
// sizes, queues named at submit), listing and retention.
#include "tests/controller/controller_fixture.h"

namespace moe::controller {
namespace {

TEST_F(ControllerTest, SubmitScheduleRunSucceed) {
  auto* a = AddWorker("a", "r0", "n0");
  auto* b = AddWorker("b", "r0", "n1");
  auto job = Submit(Spec("j", 2, 2));
  EXPECT_EQ(State(job.id()), moe::v1::SCHEDULED);
  ASSERT_EQ(a->Assignments().size(), 1u);
  ASSERT_EQ(b->Assignments().size(), 1u);
  const auto ra = a->Assignments()[0], rb = b->Assignments()[0];
  EXPECT_EQ(ra.rank() + rb.rank(), 1);
  EXPECT_EQ(ra.spec().spec().parallelism().world_size(), 2);
  EXPECT_EQ(ra.rendezvous_prefix(), rb.rendezvous_prefix());
  EXPECT_TRUE(ra.resume());
  Step("a", ra, 1);
  EXPECT_EQ(State(job.id()), moe::v1::RUNNING);
  Step("b", rb, 1);
  EXPECT_EQ(controller_->Get(job.id(), false)->last_metrics().rank_compute_seconds_size(), 2)
      << "all ranks' step 1 merged";
  Finish("a", ra, true);
  EXPECT_EQ(State(job.id()), moe::v1::RUNNING) << "one rank done is not the job done";
  Finish("b", rb, true);
  EXPECT_EQ(State(job.id()), moe::v1::SUCCEEDED);
  EXPECT_EQ(EventTypes(job.id()),
            (std::vector<std::string>{"Submitted", "Scheduled", "Running", "Succeeded"}));
  for (const auto& w : controller_->Workers()) EXPECT_EQ(w.state(), moe::v1::IDLE) << w.name();
}

// The spec reaches a rank as the typed message the controller validated and stored: every field the
// user wrote (a map of labels, schedules, optional fields) unchanged, and nothing but the attempt's
// world size rewritten. No text in between (no spec_json).
TEST_F(ControllerTest, TheRankReceivesTheTypedSpecUnchanged) {
  auto* a = AddWorker("a", "r0", "n0");
  auto* b = AddWorker("b", "r0", "n1");
  auto doc = TrainingJobFromText(R"(apiVersion: moe/v1
kind: TrainingJob
metadata:
  name: typed
  priority: 7
  labels: {team: research, "example.com/tier": gold, empty: ""}
spec:
  model: {preset: tiny, moe: {bias_update_schedule: [{until_tokens: 1.0e6, shape: constant, value: 0.001}, {shape: constant, value: 0}]}}
  parallelism: {world_size: 2, expert_parallel: 2, grad_bucket_mb: 0}
  data: {path: /data/fortunes, seq_length: 64, micro_batch_size: 1, global_batch_size: 2, split: "90,10,0"}
  optimizer: {lr: 0.001, distributed: false}
  training: {steps: 11, seed: 99, recompute: [mlp], deterministic: true}
  checkpoint: {dir: /tmp/typed-ckpt, interval_steps: 5, keep_last: 2}
  max_restarts: 1
)");
  ASSERT_TRUE(doc.ok()) << doc.status();
  auto job = controller_->Submit(*doc);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(a->Assignments().size(), 1u);
  ASSERT_EQ(b->Assignments().size(), 1u);
  const moe::v1::TrainingJob got = a->Assignments()[0].spec();
  // Everything the user wrote arrives as written.
  google::protobuf::util::MessageDifferencer as_written;
  as_written.set_scope(google::protobuf::util::MessageDifferencer::PARTIAL);
  std::string diff;
  as_written.ReportDifferencesToString(&diff);
  EXPECT_TRUE(as_written.Compare(*doc, got)) << diff;
  EXPECT_EQ(got.metadata().labels().size(), 3);
  EXPECT_EQ(got.metadata().labels().at("example.com/tier"), "gold");
  EXPECT_TRUE(got.metadata().labels().contains("empty"));
  // And it is the record the controller stored (expanded: every default written out), as it is.
  google::protobuf::util::MessageDifferencer exact;
  EXPECT_TRUE(exact.Equals(got, job->spec())) << got.DebugString() << "\nvs stored\n"
                                              << job->spec().DebugString();
  EXPECT_TRUE(exact.Equals(got, b->Assignments()[0].spec())) << "every rank gets the same spec";
  EXPECT_TRUE(got.spec().model().has_hidden_size()) << "the preset is expanded for the rank";
}

TEST_F(ControllerTest, AWorkerReportsOnlyForTheRankItRuns) {
  AddWorker("w0", "r0", "n0");
  AddWorker("w1", "r0", "n1");
  AddWorker("intruder", "r0", "n2");
  const auto job = Submit(Spec("j", 2, 2));
  const moe::v1::Assignment a0 = channels_["w0"]->Assignments().at(0);
  Step("w0", a0, 1);
  Step("w1", channels_["w1"]->Assignments().at(0), 1);
  ASSERT_EQ(State(job.id()), moe::v1::RUNNING);
  ASSERT_EQ(controller_->Get(job.id(), false)->last_metrics().step(), 1);
  moe::v1::WorkerMessage fin;
  fin.mutable_finished()->set_job_id(a0.job_id());
  fin.mutable_finished()->set_attempt(a0.attempt());
  fin.mutable_finished()->set_rank(a0.rank());
  fin.mutable_finished()->set_ok(true);
  EXPECT_EQ(controller_->OnWorkerMessage("intruder", fin).code(), StatusCode::kPermissionDenied);
  fin.mutable_finished()->set_ok(false);
  fin.mutable_finished()->set_exit_code(2);
  fin.mutable_finished()->set_failure_class(moe::v1::FAILURE_PERMANENT);
  EXPECT_EQ(controller_->OnWorkerMessage("w1", fin).code(), StatusCode::kPermissionDenied)
      << "another rank's worker of the same job is foreign too";
  fin.mutable_finished()->set_rank(7);
  EXPECT_EQ(controller_->OnWorkerMessage("w0", fin).code(), StatusCode::kPermissionDenied)
      << "no rank 7";
  moe::v1::WorkerMessage step;
  step.mutable_step()->set_job_id(a0.job_id());
  step.mutable_step()->set_attempt(a0.attempt());
  step.mutable_step()->set_rank(a0.rank());
  step.mutable_step()->mutable_metrics()->set_step(-7);
  EXPECT_EQ(controller_->OnWorkerMessage("intruder", step).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(controller_->OnWorkerMessage("w0", step).code(), StatusCode::kInvalidArgument)
      << "a negative step";
  step.mutable_step()->mutable_metrics()->set_step(2);
  step.mutable_step()->mutable_metrics()->set_mfu(42);
  step.mutable_step()->mutable_metrics()->set_step_seconds(std::numeric_limits<double>::infinity());
  EXPECT_TRUE(controller_->OnWorkerMessage("w0", step).ok())
      << "implausible figures are dropped, the stream goes on";
  Step("w1", channels_["w1"]->Assignments().at(0), 2);
  EXPECT_EQ(controller_->Get(job.id(), false)->last_metrics().step(), 1)
      << "the dropped report counted for nothing";
  step.mutable_step()->mutable_metrics()->set_mfu(0.5);
  step.mutable_step()->mutable_metrics()->set_step_seconds(0.2);
  for (int i = 0; i < 1000; ++i)
    step.mutable_step()->mutable_metrics()->add_expert_load_imbalance_per_layer(1);
  EXPECT_EQ(controller_->OnWorkerMessage("w0", step).code(), StatusCode::kInvalidArgument)
      << "more layers than the model";
  EXPECT_EQ(State(job.id()), moe::v1::RUNNING)
      << "nothing a foreign or bad report said changed the job";
  EXPECT_EQ(controller_->Get(job.id(), false)->last_metrics().step(), 1);
  moe::v1::Register fake;
  fake.set_name("intruder2");
  fake.set_rack("r0");
  fake.set_node("n3");
  fake.set_device("cpu");
  *fake.add_finished() = fin.finished();
  fake.mutable_finished(0)->set_rank(0);
  FakeChannel ch;
  EXPECT_EQ(controller_->Register(fake, &ch).status().code(), StatusCode::kPermissionDenied)
      << "nor in a registration's outcomes";
  EXPECT_EQ(State(job.id()), moe::v1::RUNNING);
}

TEST_F(ControllerTest, RendezvousKeysAreTheCallersOwnAttempts) {
  AddWorker("w0", "r0", "n0");
  AddWorker("idle", "r0", "n1");
  const auto job = Submit(Spec("j", 1, 1));
  const moe::v1::Assignment a0 = channels_["w0"]->Assignments().at(0);
  auto scope = controller_->RendezvousScope(sessions_["w0"]);
  ASSERT_TRUE(scope.ok()) << scope.status();
  EXPECT_EQ(*scope, std::vector<std::string>{"job/" + job.id() + "/attempt/" +
                                             std::to_string(a0.attempt()) + "/"});
  EXPECT_EQ(controller_->RendezvousScope(sessions_["idle"]).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(controller_->RendezvousScope("").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(controller_->RendezvousScope("guess").status().code(), StatusCode::kUnauthenticated);
}

TEST_F(ControllerTest, SubmitIsIdempotentByRequestIdAndCheckpointDirectoriesAreNotShared) {
  AddWorker("w0", "r0", "n0");
  ASSERT_TRUE(controller_->SetDrained("w0", true).ok());
  auto a = controller_->Submit(SpecToProto(Spec("a", 1, 1)), "req-1");
  ASSERT_TRUE(a.ok()) << a.status();
  auto again = controller_->Submit(SpecToProto(Spec("a", 1, 1)), "req-1");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id(), a->id()) << "a retry returns the job the first submit created";
  EXPECT_EQ(controller_->List({}).size(), 1u);
  JobSpec same_dir = Spec("b", 1, 1);
  same_dir.checkpoint.dir = "/tmp//ckpt-a/./";  // the same directory, written otherwise
  auto shared = controller_->Submit(SpecToProto(same_dir), "req-2");
  EXPECT_EQ(shared.status().code(), StatusCode::kFailedPrecondition) << shared.status();
  ASSERT_TRUE(controller_->Cancel(a->id()).ok());
  auto after = controller_->Submit(SpecToProto(same_dir), "req-3");
  EXPECT_EQ(after.status().code(), StatusCode::kFailedPrecondition)
      << "a directory serves one job for its whole life";
  EXPECT_NE(after.status().message().find("finished job " + a->id()), std::string::npos)
      << after.status();
  JobSpec dotdot = Spec("b2", 1, 1);
  dotdot.checkpoint.dir = "/tmp/x/../ckpt-a";  // ".." resolved: a's directory again
  EXPECT_EQ(controller_->Submit(SpecToProto(dotdot)).status().code(),
            StatusCode::kFailedPrecondition);
  auto resubmitted = controller_->Submit(SpecToProto(Spec("a", 1, 1)), "req-4");
  EXPECT_TRUE(resubmitted.ok()) << "the same name and owner take a finished job's directory: "
                                << resubmitted.status();
  JobSpec huge = Spec("c", 1, 1);
  huge.data.path = std::string(1 << 20, 'x');
  EXPECT_EQ(controller_->Submit(SpecToProto(huge)).status().code(), StatusCode::kInvalidArgument);
}

// Checkpoint directories do not nest: one job's commits prune the step directories beneath its own
// (the outer job's final commit deleted an inner job's checkpoints), live or finished.
TEST_F(ControllerTest, CheckpointDirectoriesDoNotNest) {
  AddWorker("w0", "r0", "n0");
  JobSpec outer = Spec("outer", 1, 1);
  outer.checkpoint.dir = "/tmp/nest/outer";
  auto o = controller_->Submit(SpecToProto(outer));
  ASSERT_TRUE(o.ok()) << o.status();
  JobSpec inner = Spec("inner", 1, 1);
  inner.checkpoint.dir = "/tmp/nest/outer/inner";
  auto in = controller_->Submit(SpecToProto(inner));
  ASSERT_EQ(in.status().code(), StatusCode::kFailedPrecondition) << in.status();
  EXPECT_NE(in.status().message().find("lies inside /tmp/nest/outer"), std::string::npos)
      << in.status();
  JobSpec around = Spec("around", 1, 1);
  around.checkpoint.dir = "/tmp/nest/";
  auto ar = controller_->Submit(SpecToProto(around));
  ASSERT_EQ(ar.status().code(), StatusCode::kFailedPrecondition) << ar.status();
  EXPECT_NE(ar.status().message().find("holds /tmp/nest/outer"), std::string::npos) << ar.status();
  ASSERT_TRUE(controller_->Cancel(o->id()).ok());
  EXPECT_EQ(controller_->Submit(SpecToProto(inner)).status().code(),
            StatusCode::kFailedPrecondition)
      << "a finished job's checkpoints are still there to be pruned";
  JobSpec sibling = Spec("sibling", 1, 1);
  sibling.checkpoint.dir = "/tmp/nest/outer-2";  // a prefix of the name, not of the path
  EXPECT_TRUE(controller_->Submit(SpecToProto(sibling)).ok());
  // A relative directory lies under each worker's first root, which the controller does not know:
  // it is not compared as if it were below / ("tmp" does not hold /tmp/nest/outer).
  JobSpec relative = Spec("relative", 1, 1);
  relative.checkpoint.dir = "tmp";
  EXPECT_TRUE(controller_->Submit(SpecToProto(relative)).ok());
}

// A job may not checkpoint to the controller's root, nor to a directory that holds it: every job's
// default directory lies beneath it.
TEST_F(ControllerTest, TheCheckpointRootAndItsParentsAreNoJobsDirectory) {
  config_.checkpoint_root = "/srv/moe/checkpoints/";
  Make();
  for (const std::string dir : {"/srv/moe/checkpoints", "/srv/moe", "/srv/moe/./checkpoints/"}) {
    JobSpec spec = Spec("at-root", 1, 1);
    spec.checkpoint.dir = dir;
    auto refused = controller_->Submit(SpecToProto(spec));
    ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << dir;
    EXPECT_NE(refused.status().message().find(
                  "is the controller's checkpoint root or holds it (/srv/moe/checkpoints)"),
              std::string::npos)
        << refused.status();
  }
}

// Defaults that work together: a worker on default checkpoint roots is offered the controller's
// root, which counts for it on the controller's own host at once and elsewhere once the worker
// reports it mounted; until then a job that names no directory is refused, naming the way out.
TEST_F(ControllerTest, ACheckpointRootCountsWhereItIsMounted) {
  config_.checkpoint_root = "/srv/moe/checkpoints";
  Make();
  const auto reg = [&](const std::string& name, const std::string& host) {
    channels_[name] = std::make_unique<FakeChannel>();
    moe::v1::Register r;
    r.set_name(name);
    r.set_rack("r0");
    r.set_node(name);
    r.set_device("cpu");
    r.set_memory_bytes(int64_t{64} << 30);
    r.set_host_id(host);
    r.add_checkpoint_roots("/tmp/moe-worker-" + name + "/checkpoints");
    r.set_uses_default_checkpoint_roots(true);
    auto out = controller_->Register(r, channels_[name].get());
    EXPECT_TRUE(out.ok()) << out.status();
    if (out.ok()) sessions_[name] = out->session();
    return out.ok() ? out->checkpoint_root() : std::string("refused");
  };
  EXPECT_EQ(reg("far", "another-machine/far"), "/srv/moe/checkpoints") << "offered";
  JobSpec spec = Spec("nodir", 1, 1);
  spec.checkpoint.dir.clear();
  auto refused = controller_->Submit(SpecToProto(spec));
  ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("names no spec.checkpoint.dir"), std::string::npos)
      << refused.status();
  moe::v1::WorkerMessage bad;  // only the root it was offered
  bad.mutable_checkpoint_root_mounted()->set_root("/");
  bad.mutable_checkpoint_root_mounted()->set_ok(true);
  EXPECT_EQ(controller_->OnWorkerMessage("far", bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(controller_->Submit(SpecToProto(spec)).status().code(),
            StatusCode::kFailedPrecondition);
  moe::v1::WorkerMessage mounted;
  mounted.mutable_checkpoint_root_mounted()->set_root("/srv/moe/checkpoints");
  mounted.mutable_checkpoint_root_mounted()->set_ok(true);
  ASSERT_TRUE(controller_->OnWorkerMessage("far", mounted).ok());
  auto job = controller_->Submit(SpecToProto(spec));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().spec().checkpoint().dir(), "/srv/moe/checkpoints/" + job->id());
  // On the controller's own host the root is there (the controller made it): it counts at once. (A
  // restarted controller: "far" is lost until it registers again.)
  Make();
  EXPECT_EQ(reg("near", ThisHostId()), "/srv/moe/checkpoints");
  JobSpec second = Spec("nodir2", 1, 1);
  second.checkpoint.dir.clear();
  EXPECT_TRUE(controller_->Submit(SpecToProto(second)).ok());
  // ... unless the agent answers that it cannot use it (another user, say): taken back.
  moe::v1::WorkerMessage cannot;
  cannot.mutable_checkpoint_root_mounted()->set_root("/srv/moe/checkpoints");
  cannot.mutable_checkpoint_root_mounted()->set_ok(false);
  cannot.mutable_checkpoint_root_mounted()->set_why("not writable by this worker");
  ASSERT_TRUE(controller_->OnWorkerMessage("near", cannot).ok());
  JobSpec third = Spec("nodir3", 1, 1);
  third.checkpoint.dir.clear();
  EXPECT_EQ(controller_->Submit(SpecToProto(third)).status().code(),
            StatusCode::kFailedPrecondition);
  // An agent with roots of its own was offered nothing: its answer is refused.
  AddWorker("own", "r0", "own");
  EXPECT_EQ(controller_->OnWorkerMessage("own", mounted).code(), StatusCode::kInvalidArgument);
}

TEST_F(ControllerTest, ListJobsPagesWithFiltersAndDeleteRemovesFinishedJobs) {
  AddWorker("w0", "r0", "n0");
  ASSERT_TRUE(controller_->SetDrained("w0", true).ok());
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    JobSpec spec = Spec(i == 3 ? "other" : "job" + std::to_string(i), 1, 1);
    spec.labels["team"] = i % 2 == 0 ? "research" : "prod";
    if (i == 4) spec.labels["spot"] = "";
    ids.push_back(Submit(spec).id());
    clock_.Advance(0.001);
  }
  moe::v1::ListJobsRequest req;
  req.set_page_size(2);
  std::vector<std::string> seen;
  do {
    auto page = controller_->ListPage(req);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->jobs_size(), 2);
    for (const auto& j : page->jobs()) seen.push_back(j.id());
    req.set_page_token(page->next_page_token());
  } while (!req.page_token().empty());
  EXPECT_EQ(seen, ids) << "every job once, oldest first";
  req.Clear();
  req.set_name_prefix("other");
  EXPECT_EQ(controller_->ListPage(req)->jobs_size(), 1);
  // Label selectors are the controller's (kubectl's syntax), and work across pages.
  req.Clear();
  req.set_label_selector("team=research,!spot");
  req.set_page_size(1);
  seen.clear();
  do {
    auto page = controller_->ListPage(req);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const auto& j : page->jobs()) seen.push_back(j.id());
    req.set_page_token(page->next_page_token());
  } while (!req.page_token().empty());
  EXPECT_EQ(seen, (std::vector<std::string>{ids[0], ids[2]}));
  req.Clear();
  req.set_label_selector("team in (a)");
  const auto bad = controller_->ListPage(req);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("label_selector"), std::string::npos) << bad.status();
  req.Clear();
  req.set_page_size(5000);
  EXPECT_EQ(controller_->ListPage(req).status().code(), StatusCode::kInvalidArgument);
  req.Clear();
  req.set_page_token("garbage");
  EXPECT_EQ(controller_->ListPage(req).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(controller_->Delete(ids[0]).code(), StatusCode::kFailedPrecondition) << "a live job";
  ASSERT_TRUE(controller_->Cancel(ids[0]).ok());
  store_.fail_writes = true;
  EXPECT_EQ(controller_->Delete(ids[0]).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(controller_->Get(ids[0], false).ok()) << "a delete the store refused keeps the job";
  store_.fail_writes = false;
  ASSERT_TRUE(controller_->Delete(ids[0]).ok());
  EXPECT_EQ(controller_->Get(ids[0], false).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_.LoadEvents(ids[0])->empty()) << "its events went with it";
}

// ListJobs brings the basic view unless the full one is asked for: the spec's metadata and
// parallelism (what moectl's table shows), not the rest of the expanded spec.
TEST_F(ControllerTest, ListJobsBringsTheBasicViewUnlessTheFullOneIsAsked) {
  AddWorker("w0", "r0", "n0");
  ASSERT_TRUE(controller_->SetDrained("w0", true).ok());
  JobSpec spec = Spec("viewed", 1, 1);
  spec.labels["team"] = "research";
  const moe::v1::Job job = Submit(spec);
  const moe::v1::Job stored = *controller_->Get(job.id(), false);
  ASSERT_TRUE(stored.spec().spec().has_model());
  moe::v1::ListJobsRequest req;
  for (const auto view : {moe::v1::JOB_VIEW_UNSPECIFIED, moe::v1::JOB_VIEW_BASIC}) {
    req.set_view(view);
    const auto page = controller_->ListPage(req);
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_EQ(page->jobs_size(), 1);
    const moe::v1::Job& j = page->jobs(0);
    EXPECT_EQ(j.spec().metadata().name(), "viewed");
    EXPECT_EQ(j.spec().metadata().labels().at("team"), "research");
    EXPECT_EQ(j.spec().api_version(), stored.spec().api_version());
    EXPECT_EQ(j.spec().spec().parallelism().world_size(), 1);
    EXPECT_FALSE(j.spec().spec().has_model()) << "the basic view has no model";
    EXPECT_FALSE(j.spec().spec().has_data());
    EXPECT_FALSE(j.spec().spec().has_training());
    EXPECT_EQ(j.state(), stored.state());
    EXPECT_FALSE(j.waiting_reason().empty()) << "a queued job says why, as in the full view";
    EXPECT_LT(j.ByteSizeLong(), stored.ByteSizeLong() / 2)
        << "a basic job is a fraction of a full one";
  }
  req.set_view(moe::v1::JOB_VIEW_FULL);
  const auto full = controller_->ListPage(req);
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_EQ(full->jobs_size(), 1);
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(full->jobs(0).spec(), stored.spec()))
      << "the full view carries the expanded spec whole";
  req.set_view(static_cast<moe::v1::JobView>(7));
  const auto bad = controller_->ListPage(req);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("view"), std::string::npos) << bad.status();
}

// Every field of a Job, present (scalars non-zero, messages with a field set, one element of each
// repeated one): the basic view copies each but the spec, so that a field added to Job later and
// not to CopyBasicView fails here.
TEST(CopyBasicViewTest, CopiesEveryFieldButTheSpecsBody) {
  namespace pb = google::protobuf;
  moe::v1::Job from;
  const pb::Descriptor* d = from.GetDescriptor();
  const pb::Reflection* r = from.GetReflection();
  const auto fill_scalar = [](pb::Message* m, const pb::FieldDescriptor* f) {
    const pb::Reflection* mr = m->GetReflection();
    switch (f->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_INT32:
        mr->SetInt32(m, f, 3);
        return true;
      case pb::FieldDescriptor::CPPTYPE_INT64:
        mr->SetInt64(m, f, 4);
        return true;
      case pb::FieldDescriptor::CPPTYPE_UINT32:
        mr->SetUInt32(m, f, 5);
        return true;
      case pb::FieldDescriptor::CPPTYPE_UINT64:
        mr->SetUInt64(m, f, 6);
        return true;
      case pb::FieldDescriptor::CPPTYPE_DOUBLE:
        mr->SetDouble(m, f, 7.5);
        return true;
      case pb::FieldDescriptor::CPPTYPE_FLOAT:
        mr->SetFloat(m, f, 8.5f);
        return true;
      case pb::FieldDescriptor::CPPTYPE_BOOL:
        mr->SetBool(m, f, true);
        return true;
      case pb::FieldDescriptor::CPPTYPE_STRING:
        mr->SetString(m, f, "x");
        return true;
      case pb::FieldDescriptor::CPPTYPE_ENUM:
        mr->SetEnumValue(m, f, 1);
        return true;
      default:
        return false;
    }
  };
  const auto fill_message = [&](pb::Message* m) {
    for (int i = 0; i < m->GetDescriptor()->field_count(); ++i) {
      const pb::FieldDescriptor* f = m->GetDescriptor()->field(i);
      if (!f->is_repeated() && fill_scalar(m, f)) return;
    }
  };
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) {
      ASSERT_EQ(f->cpp_type(), pb::FieldDescriptor::CPPTYPE_MESSAGE) << f->name();
      fill_message(r->AddMessage(&from, f));
    } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      fill_message(r->MutableMessage(&from, f));
    } else {
      ASSERT_TRUE(fill_scalar(&from, f)) << f->name();
    }
  }
  from.mutable_spec()->mutable_spec()->mutable_parallelism()->set_world_size(8);
  from.mutable_spec()->mutable_spec()->mutable_model()->set_preset("tiny");
  from.mutable_spec()->mutable_metadata()->set_name("n");
  moe::v1::Job basic;
  CopyBasicView(from, &basic);
  moe::v1::Job want = from;
  want.mutable_spec()->mutable_spec()->clear_model();
  std::string diff;
  pb::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(want, basic)) << diff;
}

TEST_F(ControllerTest, FinishedJobsGoAfterTheRetention) {
  AddWorker("w0", "r0", "n0");
  ASSERT_TRUE(controller_->SetDrained("w0", true).ok());
  const auto old_job = Submit(Spec("old", 1, 1));
  const auto live = Submit(Spec("live", 1, 1));
  ASSERT_TRUE(controller_->Cancel(old_job.id()).ok());
  clock_.Advance(config_.finished_job_retention_seconds - 1);
  controller_->Tick();
  EXPECT_TRUE(controller_->Get(old_job.id(), false).ok()) << "within the retention";
  clock_.Advance(2);
  Heartbeats();
  controller_->Tick();
  EXPECT_EQ(controller_->Get(old_job.id(), false).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(controller_->Get(live.id(), false).ok()) << "live jobs stay whatever their age";
}

TEST_F(ControllerTest, AnAssignedRankThatNeverStartsFailsItsAttemptAtTheDeadline) {
  auto* ch = AddWorker("w0", "r0", "n0");
  const auto job = Submit(Spec("j", 1, 1));
  ASSERT_EQ(ch->Assignments().size(), 1u);
  clock_.Advance(config_.rank_start_seconds - 1);
  Heartbeats();
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::SCHEDULED);
  clock_.Advance(2);
  Heartbeats();
  controller_->Tick();
  EXPECT_EQ(EventCount(job.id(), "AttemptFailed"), 1);
  const auto j = *controller_->Get(job.id(), true);
  EXPECT_EQ(j.restarts(), 1);
  std::string why;
  for (const auto& e : j.events())
    if (e.type() == "AttemptFailed") why = e.message();
  EXPECT_NE(why.find("rank 0 on worker w0 did not start within"), std::string::npos) << why;
}

TEST_F(ControllerTest, CpuWorkersOnOneHostShareItsCores) {
  for (const char* n : {"a", "b"}) {
    auto& ch = channels_[n];
    ch = std::make_unique<FakeChannel>();
    moe::v1::Register r;
    r.set_name(n);
    r.set_rack("r0");
    r.set_node(std::string("node-") + n);  // distinct node names, one machine
    r.set_device("cpu");
    r.set_memory_bytes(int64_t{64} << 30);
    r.set_cpu_cores(8);
    r.set_host_id("machine-1/host");
    r.set_memory_bytes(int64_t{64} << 30);
    ASSERT_TRUE(controller_->Register(r, ch.get()).ok());
  }
  Submit(Spec("j", 2, 2));
  ASSERT_EQ(channels_["a"]->Assignments().size(), 1u);
  EXPECT_EQ(channels_["a"]->Assignments()[0].cpu_threads(), 4)
      << "8 cores over the 2 CPU workers of the host";
}

TEST_F(ControllerTest, EventsNameWhoSubmittedAndCancelled) {
  AddWorker("a", "r0", "n0");
  auto j = controller_->Submit(SpecToProto(Spec("who", 1, 1)), "", "alice");
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_TRUE(controller_->Cancel(j->id(), "bob").ok());
  auto got = controller_->Get(j->id(), /*with_events=*/true);
  ASSERT_TRUE(got.ok());
  std::string all;
  for (const auto& ev : got->events()) all += ev.type() + ": " + ev.message() + "\n";
  EXPECT_NE(all.find("Submitted: priority 0, 1 ranks (EP 1, groups within one rack); by alice"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("Stopping: cancelled by bob"), std::string::npos) << all;
  auto anon = controller_->Submit(SpecToProto(Spec("anon", 1, 1)));  // no authentication: no name
  ASSERT_TRUE(anon.ok());
  ASSERT_TRUE(controller_->Cancel(anon->id()).ok());
  bool by_a_user = false;
  auto anon_job =
      controller_->Get(anon->id(), true);  // held: a range-for over a temporary's member dangles
  ASSERT_TRUE(anon_job.ok());
  for (const auto& ev : anon_job->events()) by_a_user |= ev.message() == "cancelled by a user";
  EXPECT_TRUE(by_a_user);
}

TEST_F(ControllerTest, Fp8JobsAreAcceptedAndFp32OnCudaIsRefusedNamingTheField) {
  AddWorker("a", "r0", "n0");
  JobSpec spec = Spec("fp8", 1, 1);
  spec.resources.precision = "fp8";  // emulated on cpu
  auto j = controller_->Submit(SpecToProto(spec));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->spec().spec().resources().precision(), "fp8");
  JobSpec wide = Spec("wide", 1, 1);
  wide.resources.device = "cuda";
  wide.resources.precision = "fp32";
  auto k = controller_->Submit(SpecToProto(wide));
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(k.status().message().find("spec.resources.precision: fp32 on cuda"), std::string::npos)
      << k.status();
  EXPECT_EQ(controller_->List({}).size(), 1u) << "only the fp8 job is stored";
}

TEST_F(ControllerTest, AJobNeedingMoreMemoryThanAnyWorkerHasIsRefusedWithBothNumbers) {
  AddWorker("a", "r0", "n0", {}, /*memory=*/0);  // reports no memory: nothing to check against
  JobSpec huge = Spec("huge", 1, 1);
  huge.model.hidden_size = 16384;  // tiny's layers at h = 16384: tens of GB per rank
  huge.model.num_heads = 128;
  ASSERT_TRUE(ValidateJobSpec(huge).ok());
  EXPECT_TRUE(controller_->Submit(SpecToProto(huge)).ok()) << "no worker reports memory: accepted";
  auto& ch = channels_["m"];
  ch = std::make_unique<FakeChannel>();
  moe::v1::Register r;
  r.set_name("m"), r.set_rack("r0"), r.set_node("n1"), r.set_device("cpu");
  r.set_memory_bytes(int64_t{8} << 30);  // 8.6 GB, shared by no other CPU worker on its host id
  r.set_host_id("host-m");
  ASSERT_TRUE(controller_->Register(r, ch.get()).ok());
  const size_t stored = controller_->List({}).size();
  huge.name = "huge2";
  huge.checkpoint.dir = "/tmp/ckpt-huge2";
  auto j = controller_->Submit(SpecToProto(huge));
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kFailedPrecondition);
  const std::string msg = j.status().message();
  std::printf("refused: %s\n", msg.c_str());
  EXPECT_NE(msg.find("GB per rank"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8.59 GB of the roomiest cpu worker (m)"), std::string::npos) << msg;
  EXPECT_EQ(controller_->List({}).size(), stored) << "nothing stored";
  EXPECT_TRUE(controller_->Submit(SpecToProto(Spec("fits", 1, 1))).ok()) << "a tiny job still fits";
}

// Memory is checked at placement too: a job submitted before any worker registered waits, with the
// reason, on workers too small for it (and on ones that report no memory), instead of running
// there.
TEST_F(ControllerTest, ATooBigJobSubmittedBeforeAnyWorkerWaitsAndSaysWhy) {
  JobSpec huge = Spec("huge", 1, 1);
  huge.model.hidden_size = 16384;
  huge.model.num_heads = 128;
  auto job = Submit(huge);  // no worker: nothing to check against at submit
  AddWorker("small", "r0", "n0", {}, int64_t{2} << 30);
  AddWorker("silent", "r0", "n1", {}, /*memory=*/0);
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::PENDING);
  EXPECT_TRUE(channels_["small"]->Assignments().empty() &&
              channels_["silent"]->Assignments().empty());
  const std::string why = controller_->Get(job.id(), false)->waiting_reason();
  EXPECT_NE(why.find("2 more lack the"), std::string::npos) << why;
  EXPECT_NE(why.find("the roomiest has 2.15 GB"), std::string::npos) << why;
  EXPECT_NE(why.find("1 report no memory"), std::string::npos) << why;
  auto fits = Submit(Spec("fits", 1, 1));
  EXPECT_EQ(State(fits.id()), moe::v1::SCHEDULED)
      << "a job that fits goes on the worker with memory";
  EXPECT_EQ(channels_["small"]->Assignments().size(), 1u);
}

TEST_F(ControllerTest, AJobLargerThanTheClusterWaitsForCapacityAndOneOverTheCeilingIsRefused) {
  auto early =
      Submit(Spec("early", 2, 2));  // before any worker registered: the order of a Slurm script
  EXPECT_EQ(State(early.id()), moe::v1::PENDING);
  EXPECT_NE(controller_->Get(early.id(), false)
                ->waiting_reason()
                .find("waiting for capacity: the job needs 2 cpu workers and "
                      "the cluster has 0 (2 more)"),
            std::string::npos)
      << controller_->Get(early.id(), false)->waiting_reason();
  AddWorker("a", "r0", "n0");
  AddWorker("b", "r1", "n1");
  // EP 2 within a rack, but each rack has one worker: it waits, saying why.
  EXPECT_EQ(State(early.id()), moe::v1::PENDING);
  EXPECT_NE(controller_->Get(early.id(), false)->waiting_reason().find("inside one rack"),
            std::string::npos)
      << controller_->Get(early.id(), false)->waiting_reason();
  AddWorker("c", "r0", "n2");
  EXPECT_EQ(State(early.id()), moe::v1::SCHEDULED) << "placed once a second worker in r0 arrived";
  config_.max_job_ranks = 2;
  Make();
  auto j = controller_->Submit(SpecToProto(Spec("too-big", 4, 1)));
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(
      j.status().message().find(
          "can never fit: spec.parallelism.world_size 4 exceeds this controller's ceiling of 2"),
      std::string::npos)
      << j.status();
  EXPECT_EQ(controller_->List({}).size(), 1u) << "the refused job is not stored";
  // Semantic errors carry field paths.
  auto bad = SpecToProto(Spec("bad", 2, 2));
  bad.mutable_spec()->mutable_model()->mutable_moe()->set_top_k(0);
  j = controller_->Submit(bad);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("spec.model.moe.top_k"), std::string::npos) << j.status();
}

}  // namespace
}  // namespace moe::controller
