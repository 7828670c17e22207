#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "common/file_util.h"
#include "worker/engine/data/indexed_dataset.h"
#include "worker/engine/data/sampler.h"

namespace moe {
namespace {

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/moe-dataset-test-" + std::to_string(::getpid());
    ASSERT_TRUE(MakeDirs(dir_).ok());
    prefix_ = dir_ + "/ds";
    data::IndexedDatasetWriter w(prefix_, 100);
    ASSERT_TRUE(w.AddDocument({1, 2, 3, 4}).ok());
    ASSERT_TRUE(w.AddDocument({5, 6}).ok());
    ASSERT_TRUE(w.AddDocument({7, 8, 9, 10, 11, 12, 13}).ok());
    ASSERT_TRUE(w.Finish("{\"vocab_size\": 100}\n").ok());
  }
  void TearDown() override { (void)RemoveAll(dir_); }
  void Rewrite(const std::string& path, const std::string& data) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << data;
  }
  std::string dir_, prefix_;
};

TEST_F(DatasetTest, RoundTripsTheMegatronFormat) {
  auto ds = data::IndexedDataset::Open(prefix_, 100);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_sequences(), 3);
  EXPECT_EQ((*ds)->num_documents(), 3);
  EXPECT_EQ((*ds)->num_tokens(), 13);
  std::vector<int32_t> all(13);
  (*ds)->Read(0, 13, all.data());
  EXPECT_EQ(all, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}));
  // The header, byte by byte: magic, version 1, dtype uint16 (8), 3 sequences, 4 document indices.
  auto idx = ReadFileToString(prefix_ + ".idx");
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(idx->substr(0, 9), std::string("MMIDIDX\0\0", 9));
  EXPECT_EQ((*idx)[17], 8);
  EXPECT_EQ(idx->size(), 34u + 3 * 4 + 3 * 8 + 4 * 8);
}

TEST_F(DatasetTest, WrongMagicIsAClearError) {
  auto idx = *ReadFileToString(prefix_ + ".idx");
  idx[0] = 'X';
  Rewrite(prefix_ + ".idx", idx);
  auto ds = data::IndexedDataset::Open(prefix_, 100);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("wrong magic"), std::string::npos) << ds.status();
  EXPECT_NE(ds.status().message().find(prefix_ + ".idx"), std::string::npos)
      << "the error names the file";
}

// fuzz_indexed_dataset's crash (tests/fuzz/regressions/fuzz_indexed_dataset): a document index
// between the first (0) and the last (the sequence count) that went negative indexed the pointers
// out of bounds.
TEST_F(DatasetTest, ADecreasingDocumentIndexIsAClearError) {
  auto idx = *ReadFileToString(prefix_ + ".idx");
  const size_t second = 34 + 3 * 4 + 3 * 8 + 1 * 8;  // doc_idx[1]
  const int64_t negative = -5;
  std::memcpy(idx.data() + second, &negative, 8);
  Rewrite(prefix_ + ".idx", idx);
  auto ds = data::IndexedDataset::Open(prefix_, 100);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("document index 1 decreases"), std::string::npos)
      << ds.status();
}

TEST_F(DatasetTest, TruncatedIndexIsAClearError) {
  auto idx = *ReadFileToString(prefix_ + ".idx");
  Rewrite(prefix_ + ".idx", idx.substr(0, idx.size() - 9));
  auto ds = data::IndexedDataset::Open(prefix_, 100);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(ds.status().message().find("truncated"), std::string::npos) << ds.status();
  Rewrite(prefix_ + ".idx", idx.substr(0, 20));
  ds = data::IndexedDataset::Open(prefix_, 100);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("truncated header"), std::string::npos) << ds.status();
}

TEST_F(DatasetTest, TruncatedBinIsAClearError) {
  auto bin = *ReadFileToString(prefix_ + ".bin");
  Rewrite(prefix_ + ".bin", bin.substr(0, bin.size() - 2));
  auto ds = data::IndexedDataset::Open(prefix_, 100);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("truncated or mismatched"), std::string::npos)
      << ds.status();
}

TEST_F(DatasetTest, VocabMismatchIsAClearError) {
  // The sidecar says 100; the model says 50.
  auto ds = data::IndexedDataset::Open(prefix_, 50);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("vocab mismatch"), std::string::npos) << ds.status();
  // Without the sidecar, token ids beyond the vocabulary are caught.
  ASSERT_EQ(std::remove((prefix_ + ".json").c_str()), 0);
  ds = data::IndexedDataset::Open(prefix_, 12);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("token id 13"), std::string::npos) << ds.status();
  EXPECT_TRUE(data::IndexedDataset::Open(prefix_, 14).ok());
}

TEST_F(DatasetTest, MissingFilesSayHowToMakeThem) {
  auto ds = data::IndexedDataset::Open(dir_ + "/nope", 100);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kFailedPrecondition)
      << "permanent: a restart would fail the same way";
  EXPECT_NE(ds.status().message().find("moe-prep"), std::string::npos) << ds.status();
}

TEST_F(DatasetTest, SamplerIsDeterministicAndSplitsTheGlobalBatchAcrossRanks) {
  // 13 tokens, seq 3: 4 samples of 4 tokens overlapping by one.
  DataConfig d;
  d.path = prefix_;
  d.seq_length = 3;
  d.micro_batch_size = 1;
  d.global_batch_size = 4;
  auto open = [&] { return std::move(*data::IndexedDataset::Open(prefix_, 100)); };
  data::BatchSampler one(d, 100, 9, 1, open());
  data::BatchSampler two(d, 100, 9, 2, open());
  data::BatchSampler again(d, 100, 9, 1, open());
  int32_t a[3], b[3], c[3], ta[3], tb[3];
  std::vector<std::vector<int32_t>> seen;
  for (int64_t step = 1; step <= 2; ++step) {
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t first = (step - 1) * 4;  // samples consumed before the step
      one.MicroBatch(first, 4, 0, j, a, ta);
      // W=2: rank j/2 micro-batch j%2 holds global position j.
      two.MicroBatch(first, 2, static_cast<int>(j / 2), j % 2, b, tb);
      again.MicroBatch(first, 4, 0, j, c, ta);
      EXPECT_EQ(std::vector<int32_t>(a, a + 3), std::vector<int32_t>(b, b + 3));
      EXPECT_EQ(std::vector<int32_t>(a, a + 3), std::vector<int32_t>(c, c + 3));
      EXPECT_EQ(ta[0], a[1]) << "targets are the inputs shifted by one";
      if (step == 1) seen.emplace_back(a, a + 3);
    }
  }
  // One epoch visits every sample exactly once.
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen,
            (std::vector<std::vector<int32_t>>{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}}));
}

}  // namespace
}  // namespace moe
