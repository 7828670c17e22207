#include "common/yaml.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(Yaml, BlockAndFlowCollectionsCommentsAndQuotes) {
  auto doc = ParseYaml(R"(---
# a job
apiVersion: moe/v1
metadata: {name: "tiny dsv3", priority: 2}   # trailing comment
spec:
  model:
    preset: tiny
    moe: {num_experts: 8, score_function: 'sig''moid'}
  list:
    - a
    - {b: 1}
    - key: v
      other: [1, 2, 3]
  same_indent_list:
  - x
  - y
  text: |
    line one
    line two
  empty:
)");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->Find("apiVersion")->scalar(), "moe/v1");
  EXPECT_EQ(doc->Find("metadata")->Find("name")->scalar(), "tiny dsv3");
  EXPECT_EQ(*doc->Find("metadata")->Find("priority")->AsInt("p"), 2);
  const Node* spec = doc->Find("spec");
  EXPECT_EQ(spec->Find("model")->Find("moe")->Find("score_function")->scalar(), "sig'moid");
  const Node* list = spec->Find("list");
  ASSERT_TRUE(list->IsList());
  ASSERT_EQ(list->elements().size(), 3u);
  EXPECT_EQ(list->elements()[0].scalar(), "a");
  EXPECT_EQ(list->elements()[2].Find("other")->elements().size(), 3u);
  EXPECT_EQ(list->elements()[2].Find("other")->elements()[2].scalar(), "3");
  EXPECT_EQ(spec->Find("same_indent_list")->elements().size(), 2u);
  EXPECT_EQ(spec->Find("text")->scalar(), "line one\nline two\n");
  EXPECT_TRUE(spec->Find("empty")->IsNull());
}

TEST(Yaml, JsonIsAcceptedAndWrittenBack) {
  auto doc = ParseYaml(R"({"a": [1, 2.5, true, null, "x\"y\u00e9"], "b": {"c": -3e-2}})");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(ToJson(*doc), R"({"a":[1,2.5,true,null,"x\"yé"],"b":{"c":-3e-2}})");
  // YAML plain scalars become JSON numbers, booleans or strings as they read.
  auto y = ParseYaml("lr: 3.0e-3\nname: tiny\nflag: true\nver: '1'\n");
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(ToJson(*y), R"({"lr":3.0e-3,"name":"tiny","flag":true,"ver":"1"})");
  // And back to YAML, which parses to the same document.
  auto again = ParseYaml(ToYaml(*doc));
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << ToYaml(*doc);
  EXPECT_EQ(ToJson(*again), ToJson(*doc));
}

TEST(Yaml, ErrorsNameTheLine) {
  struct Bad {
    const char* text;
    const char* message;
  };
  for (const Bad& b :
       {Bad{"a: 1\n  b: 2\n", "line 2"}, Bad{"a: {b: 1\n", "missing '}'"},
        Bad{"a: 1\na: 2\n", "duplicate key 'a'"}, Bad{"a:\n\t- x\n", "tab in indentation"},
        Bad{"a: &anchor 1\n", "anchors"}, Bad{"a: \"unterminated\n", "unterminated"},
        Bad{"a: 1\n---\nb: 2\n", "multiple documents"}}) {
    auto doc = ParseYaml(b.text);
    ASSERT_FALSE(doc.ok()) << b.text;
    EXPECT_NE(doc.status().message().find(b.message), std::string::npos)
        << doc.status() << " for:\n"
        << b.text;
  }
}

TEST(Yaml, TypedReadsNameThePath) {
  auto doc = ParseYaml("n: 12x\nd: abc\nb: maybe\n");
  ASSERT_TRUE(doc.ok());
  auto n = doc->Find("n")->AsInt("spec.training.steps");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(), "spec.training.steps: expected an integer, got '12x'");
  EXPECT_FALSE(doc->Find("d")->AsDouble("x").ok());
  EXPECT_FALSE(doc->Find("b")->AsBool("x").ok());
  EXPECT_EQ(*ParseYaml("n: 1e3")->Find("n")->AsInt("n"), 1000);
}

// Hostile documents: nesting is bounded (the parser and every walker of the tree recurse), and a
// job document's size too, each with a sentence naming the limit.
TEST(YamlLimits, NestingDeeperThanTheLimitIsRefusedNotACrash) {
  auto nested = [](int n) {
    return "a: " + std::string(static_cast<size_t>(n), '[') +
           std::string(static_cast<size_t>(n), ']');
  };
  EXPECT_TRUE(ParseYaml(nested(63)).ok());  // the top mapping plus 63 sequences: 64 levels
  for (int n : {64, 100, 1000, 1000000}) {
    auto doc = ParseYaml(nested(n));
    ASSERT_FALSE(doc.ok()) << n;
    EXPECT_NE(doc.status().message().find("nesting deeper than 64 levels"), std::string::npos)
        << doc.status();
  }
  std::string flow_maps = "a: ";
  for (int i = 0; i < 5000; ++i) flow_maps += "{b: ";
  flow_maps += "1" + std::string(5000, '}');
  EXPECT_FALSE(ParseYaml(flow_maps).ok());
  std::string block;  // block mappings nested by indentation
  for (int i = 0; i < 100; ++i)
    block += std::string(static_cast<size_t>(i), ' ') + "k" + std::to_string(i) + ":\n";
  auto deep_block = ParseYaml(block);
  ASSERT_FALSE(deep_block.ok());
  EXPECT_NE(deep_block.status().message().find("line 65: nesting deeper"), std::string::npos)
      << deep_block.status();
  YamlLimits wide;
  wide.max_depth = 2000;
  EXPECT_TRUE(ParseYaml(nested(1000), wide).ok()) << "the limit is the caller's";
}

TEST(YamlLimits, AJobDocumentOverOneMebibyteIsRefusedWithItsSize) {
  const std::string big = "name: '" + std::string(size_t{1} << 20, 'x') + "'";
  EXPECT_TRUE(ParseYaml(big).ok()) << "no size limit by default (our own files)";
  auto doc = ParseYaml(big, kJobDocumentLimits);
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().message(),
            "the document is " + std::to_string(big.size()) +
                " bytes, over the limit of 1048576 bytes (1 MiB) for a job document");
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// A mapping's keys are tracked in a set while it is parsed: a duplicate is still found among
// thousands (both forms), and their order is kept.
TEST(Yaml, DuplicatesAmongManyKeysAreFoundAndOrderIsKept) {
  std::string block, flow = "{";
  for (int i = 0; i < 5000; ++i) {
    block += "k" + std::to_string(i) + ": " + std::to_string(i) + "\n";
    flow += (i ? ", " : "") + ("k" + std::to_string(i)) + ": " + std::to_string(i);
  }
  auto ok = ParseYaml(block);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->items().size(), 5000u);
  EXPECT_EQ(ok->items().front().first, "k0");
  EXPECT_EQ(ok->items().back().first, "k4999");
  auto dup = ParseYaml(block + "k17: x\n");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("duplicate key 'k17'"), std::string::npos) << dup.status();
  auto flow_dup = ParseYaml(flow + ", k4999: x}");
  ASSERT_FALSE(flow_dup.ok());
  EXPECT_NE(flow_dup.status().message().find("duplicate key 'k4999'"), std::string::npos);
  EXPECT_TRUE(ParseYaml(flow + "}").ok());
}

}  // namespace
}  // namespace moe
