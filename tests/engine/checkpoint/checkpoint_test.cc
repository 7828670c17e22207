#include "worker/engine/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <fstream>

#include "common/file_util.h"
#include "kernels/elementwise.h"
#include "tests/testing/ranks.h"
#include "tests/testing/testing.h"
#include "worker/engine/checkpoint/async_checkpoint.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/optimizer.h"

namespace moe {
namespace {

using moe::testing::Values;

ModelConfig SmallModel() {
  auto m = ModelPreset("tiny");
  m->vocab_size = 64;
  m->hidden_size = 16;
  m->num_layers = 2;
  m->num_heads = 2;
  m->dense_ffn_hidden = 24;
  m->moe.ffn_hidden = 8;
  return *m;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/moe-ckpt-test-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_TRUE(RemoveAll(dir_).ok());
    model_ =
        std::make_unique<model::Model>(SmallModel(), local_.ctx, 1, DType::kF32, Device::Cpu());
    optimizer_ =
        std::make_unique<train::Optimizer>(OptimizerConfig(), model_->params(), local_.ctx,
                                           /*distributed=*/false, model_->config().moe.num_experts);
  }
  void TearDown() override { (void)RemoveAll(dir_); }
  // Makes the model's state depend on `v`.
  void Mutate(double v) {
    for (const auto& p : model_->params().all()) {
      kernels::Fill(p->value, v);
      kernels::Fill(p->m, v / 2);
      kernels::Fill(p->v, v / 4);
    }
    model_->moe_layers()[0]->SetBias(std::vector<float>(8, static_cast<float>(v)));
  }
  double First() { return Values(model_->params().all().front()->value)[0]; }
  Node State(int64_t step) {
    Node s = Node::Map();
    s.Set("step", Node::Scalar(std::to_string(step)));
    return s;
  }

  std::string dir_;
  parallel::LocalParallel local_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<train::Optimizer> optimizer_;
};

TEST_F(CheckpointTest, RoundTripsEveryTensorAndTheBias) {
  checkpoint::CheckpointManager ckpt(dir_, local_.ctx, "fp", 0);
  Mutate(1.5);
  ASSERT_TRUE(ckpt.Save(10, *model_, *optimizer_, State(10)).ok());
  Mutate(-3.0);
  auto info = ckpt.Restore(*model_, *optimizer_);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->step, 10);
  EXPECT_EQ(info->state.Find("step")->scalar(), "10");
  for (const auto& p : model_->params().all()) {
    EXPECT_EQ(Values(p->value)[0], 1.5f) << p->name;
    EXPECT_EQ(Values(p->m)[0], 0.75f) << p->name;
    EXPECT_EQ(Values(p->v)[0], 0.375f) << p->name;
  }
  EXPECT_EQ(Values(model_->moe_layers()[0]->bias())[7], 1.5f);
  EXPECT_FALSE(PathExists(dir_ + "/step_00000010.tmp"));
  EXPECT_TRUE(PathExists(dir_ + "/step_00000010/MANIFEST.json"));
}

void FlipByte(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST_F(CheckpointTest, DamagedOrTruncatedNewestFallsBackToThePreviousComplete) {
  checkpoint::CheckpointManager ckpt(dir_, local_.ctx, "fp", 0);
  Mutate(1.0);
  ASSERT_TRUE(ckpt.Save(10, *model_, *optimizer_, State(10)).ok());
  Mutate(2.0);
  ASSERT_TRUE(ckpt.Save(20, *model_, *optimizer_, State(20)).ok());
  const std::string shard = dir_ + "/step_00000020/shard_00000.bin";
  FlipByte(shard, 5000);
  Status st = ckpt.Validate(dir_ + "/step_00000020");
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("CRC mismatch"), std::string::npos) << st;
  Mutate(9.0);
  auto info = ckpt.Restore(*model_, *optimizer_);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->step, 10);
  EXPECT_EQ(First(), 1.0);
  // Truncation is caught the same way.
  Mutate(3.0);
  ASSERT_TRUE(ckpt.Save(30, *model_, *optimizer_, State(30)).ok());
  ASSERT_EQ(::truncate((dir_ + "/step_00000030/shard_00000.bin").c_str(), 100), 0);
  info = ckpt.Restore(*model_, *optimizer_);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->step, 10);
}

TEST_F(CheckpointTest, PartialCheckpointsAreIgnoredAndOldOnesPruned) {
  checkpoint::CheckpointManager ckpt(dir_, local_.ctx, "fp", /*keep_last=*/2);
  for (int64_t s : {10, 20, 30}) {
    Mutate(static_cast<double>(s));
    ASSERT_TRUE(ckpt.Save(s, *model_, *optimizer_, State(s)).ok());
  }
  EXPECT_FALSE(PathExists(dir_ + "/step_00000010"));
  ASSERT_EQ(ckpt.List().size(), 2u);
  // A crash mid-write leaves a .tmp directory; a directory without its manifest is not complete
  // either.
  ASSERT_TRUE(MakeDirs(dir_ + "/step_00000040.tmp").ok());
  ASSERT_TRUE(MakeDirs(dir_ + "/step_00000050").ok());
  Mutate(0.0);
  auto info = ckpt.Restore(*model_, *optimizer_);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->step, 30);
  EXPECT_EQ(First(), 30.0);
}

// Saves in progress of attempts that were killed or fenced mid-save stayed forever; the owner's
// manager removes every one but its own (and never a complete checkpoint).
TEST_F(CheckpointTest, StaleSavesOfOtherAttemptsAreRemoved) {
  checkpoint::CheckpointManager ckpt(dir_, local_.ctx, "fp", 0, Node(), ".tmp-a3");
  Mutate(1.0);
  ASSERT_TRUE(ckpt.Save(10, *model_, *optimizer_, State(10)).ok());
  for (const char* d : {"/step_00000020.tmp-a1", "/step_00000020.tmp-a2", "/step_00000030.tmp",
                        "/step_00000040.tmp-a3", "/stepping"}) {
    ASSERT_TRUE(MakeDirs(dir_ + d).ok());
  }
  EXPECT_EQ(ckpt.RemoveStaleSaves(), 3);
  EXPECT_FALSE(PathExists(dir_ + "/step_00000020.tmp-a1"));
  EXPECT_FALSE(PathExists(dir_ + "/step_00000020.tmp-a2"));
  EXPECT_FALSE(PathExists(dir_ + "/step_00000030.tmp"));
  EXPECT_TRUE(PathExists(dir_ + "/step_00000040.tmp-a3")) << "its own";
  EXPECT_TRUE(PathExists(dir_ + "/stepping")) << "not a save";
  ASSERT_EQ(ckpt.List().size(), 1u) << "the complete checkpoint stays";
}

TEST_F(CheckpointTest, AnotherModelIsRefusedClearly) {
  checkpoint::CheckpointManager writer(dir_, local_.ctx, "fingerprint-a", 0);
  ASSERT_TRUE(writer.Save(10, *model_, *optimizer_, State(10)).ok());
  checkpoint::CheckpointManager reader(dir_, local_.ctx, "fingerprint-b", 0);
  auto info = reader.Restore(*model_, *optimizer_);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(info.status().message().find("another model shape"), std::string::npos)
      << info.status();
}

// Every tensor is stored by its global shape; a missing shard leaves holes that are found before
// any rank loads, and the previous complete checkpoint is used.
TEST_F(CheckpointTest, AMissingShardIsFoundAndTheLastCompleteOneIsUsed) {
  checkpoint::CheckpointManager ckpt(dir_, local_.ctx, "fp", 0);
  Mutate(10.0);
  ASSERT_TRUE(ckpt.Save(10, *model_, *optimizer_, State(10)).ok());
  Mutate(20.0);
  ASSERT_TRUE(ckpt.Save(20, *model_, *optimizer_, State(20)).ok());
  // Rewrite step 20 with only half of one tensor, as if a shard of its other half were lost.
  const std::string dir20 = dir_ + "/" + checkpoint::CheckpointManager::StepDirName(20);
  std::vector<checkpoint::TensorPiece> pieces =
      checkpoint::CheckpointPieces(*model_, *optimizer_, local_.ctx, true);
  checkpoint::TensorPiece& e = pieces.front();
  e.data = e.data.Reshape({e.data.numel()}).Rows(0, e.data.numel() / 2);
  ASSERT_TRUE(checkpoint::WriteShardFile(dir20 + "/shard_00000.bin", 0, 20, pieces).ok());
  EXPECT_EQ(ckpt.Validate(dir20).code(), StatusCode::kDataLoss);
  Mutate(0.0);
  auto info = ckpt.Restore(*model_, *optimizer_);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->step, 10);
  EXPECT_EQ(First(), 10.0);
}

TEST_F(CheckpointTest, EmptyDirectoryMeansStepZero) {
  checkpoint::CheckpointManager ckpt(dir_, local_.ctx, "fp", 0);
  auto info = ckpt.Restore(*model_, *optimizer_);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->step, 0);
}

// Storage trouble at a save (here the checkpoint directory replaced by a file, which stops root as
// well as anyone): the save is given up with the reason, the previous checkpoint stays, and a
// restore while the directory cannot be read refuses to start over from step 0.
TEST_F(CheckpointTest, StorageFailureSkipsTheSaveAndAnUnreadableDirectoryIsNotStepZero) {
  checkpoint::CheckpointManager ckpt(dir_, local_.ctx, "fp", 0);
  Mutate(10);
  ASSERT_TRUE(ckpt.Save(10, *model_, *optimizer_, State(10)).ok());
  const std::string away = dir_ + ".away";
  ASSERT_EQ(::rename(dir_.c_str(), away.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomic(dir_, "not a directory").ok());
  Mutate(20);
  Status storage;
  ASSERT_TRUE(ckpt.Save(20, *model_, *optimizer_, State(20), &storage).ok());
  EXPECT_FALSE(storage.ok());
  EXPECT_FALSE(ckpt.Save(20, *model_, *optimizer_, State(20)).ok())
      << "without a place for the reason, Save returns it";
  auto chosen = ckpt.Choose();
  ASSERT_FALSE(chosen.ok()) << "an unreadable checkpoint directory read as empty (step " << *chosen
                            << ")";
  EXPECT_EQ(chosen.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(chosen.status().message().find("cannot be read"), std::string::npos)
      << chosen.status().message();
  ASSERT_TRUE(RemoveAll(dir_).ok());
  ASSERT_EQ(::rename(away.c_str(), dir_.c_str()), 0);
  auto back = ckpt.Restore(*model_, *optimizer_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step, 10);
  EXPECT_EQ(First(), 10.0);
  (void)RemoveAll(away);
}

// Two ranks, rank 0's storage fails: both give the checkpoint up together at once, instead of rank
// 1 waiting in a barrier for a rank 0 that left (which cost the whole job before).
TEST_F(CheckpointTest, ARanksStorageFailureIsEveryRanksAndNobodyWaits) {
  ASSERT_TRUE(WriteFileAtomic(dir_, "not a directory").ok());
  std::vector<Status> storage(2);
  const auto t0 = std::chrono::steady_clock::now();
  moe::testing::RunGlooGroup(
      2,
      [&](int rank, parallel::Communicator& comm) {
        parallel::LocalParallel groups;
        parallel::ParallelContext ctx = groups.ctx;
        ctx.world_size = 2;
        ctx.rank = rank;
        ctx.world = &comm;
        model::Model model(SmallModel(), ctx, 1, DType::kF32, Device::Cpu());
        train::Optimizer opt(OptimizerConfig(), model.params(), ctx, /*distributed=*/false,
                             model.config().moe.num_experts);
        checkpoint::CheckpointManager ckpt(dir_, ctx, "fp", 0);
        Status st = ckpt.Save(10, model, opt, State(10), &storage[static_cast<size_t>(rank)]);
        EXPECT_TRUE(st.ok()) << "rank " << rank << ": " << st;
      },
      /*timeout=*/20);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_FALSE(storage[0].ok());
  ASSERT_FALSE(storage[1].ok());
  EXPECT_NE(storage[1].message().find("other rank(s) could not write"), std::string::npos)
      << storage[1].message();
  (void)RemoveAll(dir_);
}

// The asynchronous save writes the same shard bytes as the synchronous one for the same state, and
// the state changing after Start (training goes on) does not reach the checkpoint: the snapshot
// was taken at Start.
TEST_F(CheckpointTest, AsyncSaveWritesTheSnapshotTakenAtItsStart) {
  checkpoint::CheckpointManager ckpt(dir_, local_.ctx, "fp", 0);
  Mutate(10);
  ASSERT_TRUE(ckpt.Save(10, *model_, *optimizer_, State(10)).ok());
  checkpoint::AsyncCheckpointer async(&ckpt, local_.ctx);
  Status storage;
  ASSERT_TRUE(async.Start(20, *model_, *optimizer_, State(20), &storage).ok());
  ASSERT_TRUE(storage.ok()) << storage;
  EXPECT_TRUE(async.in_flight());
  EXPECT_EQ(async.in_flight_step(), 20);
  Mutate(99);  // the next steps' updates
  auto outcome = async.Poll(/*wait=*/true, *optimizer_, &storage);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, checkpoint::AsyncCheckpointer::Outcome::kCommitted);
  EXPECT_FALSE(async.in_flight());
  EXPECT_GT(async.last_bytes(), 0u);
  auto shard = [&](int64_t step) {
    auto s = ReadFileToString(dir_ + "/" + checkpoint::CheckpointManager::StepDirName(step) +
                              "/shard_00000.bin");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : std::string();
  };
  const std::string async_bytes = shard(20);
  Mutate(10);
  ASSERT_TRUE(ckpt.Save(20, *model_, *optimizer_, State(20)).ok());  // replaces step 20
  const std::string sync_bytes = shard(20);
  ASSERT_FALSE(async_bytes.empty());
  // The header names the step (20 in both), so the files match byte for byte.
  EXPECT_EQ(async_bytes, sync_bytes) << "the asynchronous shard differs from the synchronous one";
  Mutate(0);
  auto back = ckpt.Restore(*model_, *optimizer_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step, 20);
  EXPECT_EQ(First(), 10.0);
  auto nothing = async.Poll(/*wait=*/false, *optimizer_, &storage);
  ASSERT_TRUE(nothing.ok());
  EXPECT_EQ(*nothing, checkpoint::AsyncCheckpointer::Outcome::kNone);
}

// Two ranks, rank 0's background write fails (rank 1 may write no shard at all): Poll tells both
// ranks together (kFailed), nothing is committed, and the previous complete checkpoint stays the
// newest. Then a save that succeeds: both ranks see the same kPending answers while the writes run
// and commit together.
TEST_F(CheckpointTest, AnAsyncWriteFailureOnOneRankAbandonsTheSaveOnAll) {
  std::vector<checkpoint::AsyncCheckpointer::Outcome> failed(2), later(2);
  std::vector<std::string> reasons(2);
  ::setenv("MOE_TEST_CHECKPOINT_WRITE_FAULT", "error:20:0", 1);
  moe::testing::RunGlooGroup(
      2,
      [&](int rank, parallel::Communicator& comm) {
        parallel::LocalParallel groups;
        parallel::ParallelContext ctx = groups.ctx;
        ctx.world_size = 2;
        ctx.rank = rank;
        ctx.world = &comm;
        model::Model model(SmallModel(), ctx, 1, DType::kF32, Device::Cpu());
        train::Optimizer opt(OptimizerConfig(), model.params(), ctx, /*distributed=*/false,
                             model.config().moe.num_experts);
        checkpoint::CheckpointManager ckpt(dir_, ctx, "fp", 0);
        ASSERT_TRUE(ckpt.Save(10, model, opt, State(10)).ok());
        checkpoint::AsyncCheckpointer async(&ckpt, ctx);
        Status storage;
        ASSERT_TRUE(async.Start(20, model, opt, State(20), &storage).ok());
        auto o = async.Poll(/*wait=*/true, opt, &storage);
        ASSERT_TRUE(o.ok()) << o.status();
        failed[static_cast<size_t>(rank)] = *o;
        reasons[static_cast<size_t>(rank)] = storage.message();
        ASSERT_TRUE(async.Start(30, model, opt, State(30), &storage).ok());
        for (int i = 0; i < 10000; ++i) {
          o = async.Poll(/*wait=*/false, opt, &storage);
          ASSERT_TRUE(o.ok()) << o.status();
          if (*o != checkpoint::AsyncCheckpointer::Outcome::kPending) break;
        }
        later[static_cast<size_t>(rank)] = *o;
      },
      /*timeout=*/30);
  ::unsetenv("MOE_TEST_CHECKPOINT_WRITE_FAULT");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(failed[static_cast<size_t>(r)], checkpoint::AsyncCheckpointer::Outcome::kFailed)
        << "rank " << r;
    EXPECT_EQ(later[static_cast<size_t>(r)], checkpoint::AsyncCheckpointer::Outcome::kCommitted)
        << "rank " << r;
  }
  EXPECT_NE(reasons[0].find("injected checkpoint write failure"), std::string::npos) << reasons[0];
  EXPECT_NE(reasons[1].find("other rank(s) could not write"), std::string::npos) << reasons[1];
  EXPECT_FALSE(PathExists(dir_ + "/" + checkpoint::CheckpointManager::StepDirName(20)));
  EXPECT_FALSE(PathExists(dir_ + "/" + checkpoint::CheckpointManager::StepDirName(20) + ".tmp"))
      << "the abandoned save was not cleaned up";
  parallel::LocalParallel one;
  checkpoint::CheckpointManager reader(dir_, one.ctx, "fp", 0);
  const auto all = reader.List();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, 30);
  EXPECT_EQ(all[1].first, 10);
  EXPECT_TRUE(reader.Validate(all[0].second).ok()) << reader.Validate(all[0].second);
}

}  // namespace
}  // namespace moe
