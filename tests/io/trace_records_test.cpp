// The trace recorder's tables (io/trace_records.h): a shape list or a text gets one id, the same
// each time, and comes back as itself; lists whose dims run together alike stay apart.
#include "io/trace_records.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shardscope::trace_records {
namespace {

// A hash under which every list collides: each lookup then walks the whole probe chain and
// tells lists apart by their runs alone.
struct EveryListCollides {
  std::uint64_t operator()(const std::vector<Shape>&) const { return 7; }
};

// Shape lists that differ only where one shape ends and the next begins, or in a rank-0 shape,
// and enough others to grow the table from its first 64 slots several times.
std::vector<std::vector<Shape>> confusable_lists() {
  std::vector<std::vector<Shape>> lists{
      {Shape{2, 3}, Shape{4}},   {Shape{2}, Shape{3, 4}},
      {Shape{2, 3, 4}},          {Shape{2, 3, 4}, Shape{}},
      {Shape{}, Shape{2, 3, 4}}, {Shape{}},
      {Shape{}, Shape{}},        {Shape{1}},
      {Shape{1}, Shape{}},
  };
  for (std::int64_t i = 0; i < 300; ++i) lists.push_back({Shape{i, 2 * i + 1}, Shape{i % 7}});
  return lists;
}

template <class Table>
void expect_one_id_each(Table& table) {
  const std::vector<std::vector<Shape>> lists = confusable_lists();
  std::vector<std::uint32_t> ids;
  for (const auto& list : lists) ids.push_back(table.id(&list));
  for (std::size_t i = 0; i < lists.size(); ++i) {
    SCOPED_TRACE("list " + std::to_string(i));
    EXPECT_NE(ids[i], 0u);                   // 0 is no shapes
    EXPECT_EQ(table.id(&lists[i]), ids[i]);  // found again, after the table grew
    const ShapeStrings& strings = table.strings(ids[i]);
    ASSERT_EQ(strings.size(), lists[i].size());
    for (std::size_t k = 0; k < lists[i].size(); ++k) EXPECT_EQ(strings[k], lists[i][k].str());
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(ids[i], ids[j]) << "list " << j;
  }
}

TEST(ShapeTable, EachListOneIdThatComesBackAsIt) {
  ShapeTable table;
  const std::vector<Shape> none;
  EXPECT_EQ(table.id(nullptr), 0u);
  EXPECT_EQ(table.id(&none), 0u);
  expect_one_id_each(table);
}

TEST(ShapeTable, ListsWhoseHashesCollideStayApart) {
  BasicShapeTable<EveryListCollides> table;
  expect_one_id_each(table);
}

TEST(TextTable, EachTextOneIdAndTheHintOnlyWhenItMatches) {
  TextTable table;
  EXPECT_EQ(table.id(""), 0u);
  const std::vector<std::string> texts{"matmul", "concat", "attn.qkv", "attn.out", "a"};
  std::vector<std::uint32_t> ids;
  for (const std::string& t : texts) ids.push_back(table.id(t));
  std::uint32_t last = 0;
  // Each hint is the text before, of the same length for matmul then concat, attn.qkv then
  // attn.out; then each text twice, the hint right.
  for (std::size_t i = 0; i < 4 * texts.size(); ++i) {
    const std::size_t k = i < 2 * texts.size() ? i % texts.size() : (i / 2) % texts.size();
    const std::string& t = texts[k];
    const std::uint32_t id = table.id(t, last);
    EXPECT_EQ(id, ids[k]) << t;
    EXPECT_EQ(last, id);
    EXPECT_EQ(table.text(id), t);
  }
}

}  // namespace
}  // namespace shardscope::trace_records
