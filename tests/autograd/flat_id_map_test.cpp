// FlatIdMap against std::unordered_map: the same random inserts, look-ups and erases (ids that
// collide in the table's low and high bits, erases that shift runs that wrap around the end),
// the same contents after each.
#include "autograd/flat_id_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <unordered_map>

namespace shardscope {
namespace {

void expect_same(const FlatIdMap<int>& flat, const std::unordered_map<std::uint64_t, int>& ref,
                 int round) {
  ASSERT_EQ(flat.size(), ref.size()) << "round " << round;
  std::map<std::uint64_t, int> seen;
  flat.for_each([&](std::uint64_t id, int v) { seen[id] = v; });
  ASSERT_EQ(seen.size(), ref.size()) << "round " << round;
  for (const auto& [id, v] : ref) {
    auto it = seen.find(id);
    ASSERT_NE(it, seen.end()) << "id " << id << " lost in round " << round;
    EXPECT_EQ(it->second, v) << "id " << id << " in round " << round;
  }
}

TEST(FlatIdMap, AgreesWithUnorderedMapThroughRandomInsertsAndErases) {
  std::mt19937_64 rng(7);
  FlatIdMap<int> flat;
  std::unordered_map<std::uint64_t, int> ref;
  // Few distinct ids, so that erases hit and runs form; some sequential (storage ids), some in
  // the rank bits (key_of puts the rank at bit 48).
  auto draw = [&] {
    const std::uint64_t r = rng() % 600;
    return r < 400 ? r + 1 : ((r % 4) << 48) ^ (r - 399);
  };
  for (int round = 0; round < 200; ++round) {
    for (int op = 0; op < 400; ++op) {
      const std::uint64_t id = draw();
      switch (rng() % 4) {
        case 0:
        case 1: {
          auto [value, inserted] = flat.try_emplace(id);
          const bool ref_inserted = ref.find(id) == ref.end();
          ASSERT_EQ(inserted, ref_inserted) << "id " << id;
          if (inserted) {
            ASSERT_EQ(*value, 0) << "a new value is value-initialised";
          }
          *value = op;
          ref[id] = op;
          break;
        }
        case 2:
          ASSERT_EQ(flat.erase(id), ref.erase(id) == 1) << "id " << id;
          break;
        default: {
          int* value = flat.find(id);
          auto it = ref.find(id);
          ASSERT_EQ(value != nullptr, it != ref.end()) << "id " << id;
          if (value) {
            EXPECT_EQ(*value, it->second) << "id " << id;
          }
        }
      }
    }
    expect_same(flat, ref, round);
  }
  for (const auto& [id, v] : std::unordered_map<std::uint64_t, int>(ref)) {
    ASSERT_TRUE(flat.erase(id));
    ref.erase(id);
  }
  expect_same(flat, ref, -1);
  EXPECT_EQ(flat.find(1), nullptr);
}

}  // namespace
}  // namespace shardscope
