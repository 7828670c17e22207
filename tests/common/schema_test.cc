// The generic schema machinery (common/schema.h) on a struct with every kind of member the job spec
// may grow: lists of strings, of integers, of lists and of structs, optional scalars and structs,
// bools.
#include "common/schema.h"

#include <gtest/gtest.h>

namespace moe {
namespace schema_test {

struct Point {
  int64_t tokens = 0;
  double value = 0;
  bool operator==(const Point&) const = default;
};

struct Toy {
  int64_t count = 1;
  uint64_t seed = 7;
  double rate = 0.5;
  bool enabled = false;
  std::string mode = "fast";
  std::vector<std::string> tags;
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> stages;
  Point origin;
  std::vector<Point> schedule;
  std::optional<int64_t> limit;
  std::optional<Point> elastic;
  std::vector<std::string> layers = {"attn", "mlp"};  // a list whose default is not empty
  std::string label;
  bool operator==(const Toy&) const = default;
};

}  // namespace schema_test

using schema_test::Point;
using schema_test::Toy;

template <>
const Schema<Point>& SchemaOf<Point>() {
  static const auto* schema =
      new Schema<Point>("Point", {
                                     Field("tokens", &Point::tokens, NonNegative()),
                                     Field("value", &Point::value, InRange(0, 1)),
                                 });
  return *schema;
}

template <>
const Schema<Toy>& SchemaOf<Toy>() {
  static const auto* schema = new Schema<Toy>(
      "Toy", {
                 Field("count", &Toy::count, Positive()),
                 Field("seed", &Toy::seed),
                 Field("rate", &Toy::rate, NonNegative()),
                 Field("enabled", &Toy::enabled),
                 Field("mode", &Toy::mode, OneOf({"fast", "slow", "exact"})),
                 Field("tags", &Toy::tags, Each(NotEmpty())),
                 Field("sizes", &Toy::sizes, Each(AtLeast(2))),
                 Field("stages", &Toy::stages),
                 Field("origin", &Toy::origin),
                 Field("schedule", &Toy::schedule),
                 Field("limit", &Toy::limit, Positive()),
                 Field("elastic", &Toy::elastic),
                 Field("layers", &Toy::layers),
                 // A hook that refuses one value, to show where its error lands.
                 Field("label", &Toy::label).AfterRead([](Toy* t) {
                   return t->label == "bad" ? InvalidArgumentError("no bad labels") : OkStatus();
                 }),
             });
  return *schema;
}

namespace {

StatusOr<Toy> ReadToy(std::string_view yaml) {
  MOE_ASSIGN_OR_RETURN(Node doc, ParseYaml(yaml));
  Toy toy;
  MOE_RETURN_IF_ERROR(SchemaOf<Toy>().Read(doc, "toy", &toy));
  MOE_RETURN_IF_ERROR(SchemaOf<Toy>().Check(toy, "toy"));
  return toy;
}

TEST(Schema, ReadsEveryKind) {
  auto toy = ReadToy(R"(
count: 3
seed: 18446744073709551615
rate: 2.5e-1
enabled: true
mode: exact
tags: [a, b]
sizes: [2, 4]
stages: [[0, 1], [2], []]
origin: {tokens: 5, value: 0.5}
schedule:
  - {tokens: 0, value: 0.1}
  - tokens: 100
    value: 0.2
limit: 9
elastic: {tokens: 4}
layers: []
)");
  ASSERT_TRUE(toy.ok()) << toy.status();
  EXPECT_EQ(toy->count, 3);
  EXPECT_EQ(toy->seed, 18446744073709551615u);
  EXPECT_DOUBLE_EQ(toy->rate, 0.25);
  EXPECT_TRUE(toy->enabled);
  EXPECT_EQ(toy->mode, "exact");
  EXPECT_EQ(toy->tags, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(toy->sizes, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(toy->stages, (std::vector<std::vector<int64_t>>{{0, 1}, {2}, {}}));
  EXPECT_EQ(toy->origin, (Point{5, 0.5}));
  EXPECT_EQ(toy->schedule, (std::vector<Point>{{0, 0.1}, {100, 0.2}}));
  EXPECT_EQ(toy->limit, 9);
  EXPECT_EQ(toy->elastic, (Point{4, 0}));  // the fields it leaves out take the struct's defaults
  EXPECT_TRUE(toy->layers.empty());        // an empty list replaces a non-empty default
}

TEST(Schema, AbsentFieldsKeepDefaultsAndAbsentOptionalsStayAbsent) {
  auto toy = ReadToy("count: 2\nlimit: null\n");
  ASSERT_TRUE(toy.ok()) << toy.status();
  Toy expected;
  expected.count = 2;
  EXPECT_EQ(*toy, expected);
  EXPECT_FALSE(toy->limit.has_value());
  // The writer leaves absent optionals out and writes everything else.
  const Node doc = SchemaOf<Toy>().Write(*toy);
  EXPECT_EQ(doc.Find("limit"), nullptr);
  EXPECT_EQ(doc.Find("elastic"), nullptr);
  for (const auto& f : SchemaOf<Toy>().info().fields) {
    if (!f.optional) {
      EXPECT_NE(doc.Find(f.name), nullptr) << f.name;
    }
  }
  // Reading into a struct that already holds values overlays only what the document gives.
  Toy base;
  base.rate = 0.75;
  ASSERT_TRUE(SchemaOf<Toy>().Read(*ParseYaml("count: 4"), "toy", &base).ok());
  EXPECT_EQ(base.count, 4);
  EXPECT_EQ(base.rate, 0.75);
}

TEST(Schema, WrittenThenReadIsTheSameStruct) {
  Toy toy;
  toy.count = 12;
  toy.seed = 18446744073709551615u;
  toy.rate = 0.1;  // not exact in binary: the writer keeps every digit that matters
  toy.enabled = true;
  toy.mode = "slow";
  toy.tags = {"x", "needs: quotes", "123"};
  toy.sizes = {2, 3, 1000000000000};
  toy.stages = {{1, 2}, {}, {3}};
  toy.origin = {7, 0.3};
  toy.schedule = {{0, 0.5}, {10, 0.25}};
  toy.limit = 5;
  toy.elastic = Point{2, 0.125};
  toy.layers = {};
  toy.label = "ok";
  for (const std::string& text :
       {ToJson(SchemaOf<Toy>().Write(toy)), ToYaml(SchemaOf<Toy>().Write(toy))}) {
    auto again = ReadToy(text);
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
    EXPECT_EQ(*again, toy) << text;
  }
}

struct Bad {
  std::string yaml, message;
};

class BadToy : public ::testing::TestWithParam<Bad> {};

TEST_P(BadToy, NamesTheFieldByItsPath) {
  auto toy = ReadToy(GetParam().yaml);
  ASSERT_FALSE(toy.ok()) << "accepted: " << GetParam().yaml;
  EXPECT_EQ(toy.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(toy.status().message(), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    ReadErrors, BadToy,
    ::testing::Values(
        Bad{"[1, 2]", "toy: expected a mapping, got a list"},
        Bad{"count: many", "toy.count: expected an integer, got 'many'"},
        Bad{"seed: -1", "toy.seed: must be >= 0, got -1"},
        Bad{"seed: 18446744073709551616",
            "toy.seed: expected an integer, got '18446744073709551616'"},
        Bad{"rate: fast", "toy.rate: expected a finite number, got 'fast'"},
        Bad{"enabled: yes", "toy.enabled: expected true or false, got 'yes'"},
        Bad{"mode: {a: 1}", "toy.mode: expected a string, got a mapping"},
        Bad{"tags: a", "toy.tags: expected a list, got a scalar"},
        Bad{"sizes: [2, x]", "toy.sizes[1]: expected an integer, got 'x'"},
        Bad{"sizes: [2, null]", "toy.sizes[1]: expected an integer, got null"},
        Bad{"stages: [[1], [2, y]]", "toy.stages[1][1]: expected an integer, got 'y'"},
        Bad{"origin: 3", "toy.origin: expected a mapping, got a scalar"},
        Bad{"schedule: [{tokens: 1}, {tokens: t}]",
            "toy.schedule[1].tokens: expected an integer, got 't'"},
        Bad{"schedule: [{tokns: 1}]",
            "toy.schedule[0].tokns: unknown field (did you mean 'tokens'?)"},
        Bad{"elastic: {size: 2}", "toy.elastic.size: unknown field (known: tokens, value)"},
        Bad{"cont: 2", "toy.cont: unknown field (did you mean 'count'?)"},
        Bad{"label: bad", "toy.label: no bad labels"}));

INSTANTIATE_TEST_SUITE_P(
    CheckErrors, BadToy,
    ::testing::Values(Bad{"count: 0", "toy.count: must be > 0, got 0"},
                      Bad{"rate: -0.5", "toy.rate: must be >= 0, got -0.5"},
                      Bad{"mode: slower", "toy.mode: must be fast, slow or exact, got 'slower'"},
                      Bad{"tags: [a, '']", "toy.tags[1]: missing"},
                      Bad{"sizes: [2, 1]", "toy.sizes[1]: must be >= 2, got 1"},
                      Bad{"origin: {tokens: -1}", "toy.origin.tokens: must be >= 0, got -1"},
                      Bad{"origin: {value: 1}", "toy.origin.value: must be in [0, 1), got 1"},
                      Bad{"schedule: [{value: 0.5}, {value: 2}]",
                          "toy.schedule[1].value: must be in [0, 1), got 2"},
                      Bad{"limit: 0", "toy.limit: must be > 0, got 0"},
                      Bad{"elastic: {tokens: -3}", "toy.elastic.tokens: must be >= 0, got -3"}));

TEST(Schema, RequiredFieldsAndSections) {
  struct Doc {
    std::string name;
    int64_t size = 0;
  };
  // A section keeps its fields in the struct itself; a required one must be in the document.
  const Schema<Doc> schema("Doc",
                           {
                               Field("name", &Doc::name).Required("every doc has a name"),
                               Section<Doc>("shape", {Field("size", &Doc::size, Positive())}),
                           });
  Doc doc;
  Status st = schema.Read(*ParseYaml("shape: {size: 3}"), "", &doc);
  EXPECT_EQ(st.message(), "name: missing (every doc has a name)");
  ASSERT_TRUE(schema.Read(*ParseYaml("name: a\nshape: {size: 3}"), "", &doc).ok());
  EXPECT_EQ(doc.size, 3);
  EXPECT_EQ(ToJson(schema.Write(doc)), R"({"name":"a","shape":{"size":3}})");
  doc.size = 0;
  EXPECT_EQ(schema.Check(doc, "").message(), "shape.size: must be > 0, got 0");
  EXPECT_EQ(schema.Read(*ParseYaml("name: a\nshape: {sise: 3}"), "", &doc).message(),
            "shape.sise: unknown field (did you mean 'size'?)");
  EXPECT_EQ(schema.Read(*ParseYaml("[1]"), "", &doc).message(),
            "document: expected a mapping, got a list");
}

TEST(Schema, InfoDescribesEveryField) {
  const SchemaInfo& info = SchemaOf<Toy>().info();
  ASSERT_EQ(info.fields.size(), 14u);
  auto kind = [&](const char* name) { return info.Find(name)->type->kind; };
  using K = TypeInfo::Kind;
  EXPECT_EQ(kind("count"), K::kInt64);
  EXPECT_EQ(kind("seed"), K::kUint64);
  EXPECT_EQ(kind("rate"), K::kDouble);
  EXPECT_EQ(kind("enabled"), K::kBool);
  EXPECT_EQ(kind("mode"), K::kString);
  EXPECT_EQ(kind("tags"), K::kList);
  EXPECT_EQ(info.Find("tags")->type->element->kind, K::kString);
  EXPECT_EQ(info.Find("stages")->type->element->element->kind, K::kInt64);
  EXPECT_EQ(info.Find("schedule")->type->element->fields, &SchemaOf<Point>().info());
  EXPECT_EQ(info.Find("origin")->type->fields, &SchemaOf<Point>().info());
  EXPECT_TRUE(info.Find("limit")->optional);
  EXPECT_EQ(kind("limit"), K::kInt64);
  EXPECT_TRUE(info.Find("elastic")->optional);
  EXPECT_FALSE(info.Find("count")->optional);
  EXPECT_TRUE(info.Find("tags")->empty_default);
  EXPECT_FALSE(info.Find("layers")->empty_default);
  EXPECT_EQ(info.Find("nothing"), nullptr);
}

}  // namespace
}  // namespace moe
