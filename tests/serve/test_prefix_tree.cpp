// The prefix cache's radix tree against a brute-force reading of the same operations (a map of keys scanned in
// full): random keys over a small alphabet share long prefixes, split edges and merge back as keys come and go.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "serve/prefix_tree.h"

using tern::serve::PrefixTree;

namespace {

// The longest key that is a prefix of `t` and at most max_len long, by scanning every key.
const int* brute_longest(const std::map<std::vector<int32_t>, int>& m, const std::vector<int32_t>& t, size_t max_len,
                         size_t* len) {
  const int* best = nullptr;
  *len = 0;
  for (const auto& [k, v] : m)
    if (k.size() <= t.size() && k.size() <= max_len && std::equal(k.begin(), k.end(), t.begin()) &&
        (!best || k.size() > *len)) {
      best = &v;
      *len = k.size();
    }
  return best;
}

TEST(PrefixTree, MatchesBruteForceUnderRandomInsertsAndErases) {
  std::mt19937 rng(7);
  PrefixTree<int> tree;
  std::map<std::vector<int32_t>, int> ref;
  auto random_key = [&] {
    std::vector<int32_t> k;
    if (!ref.empty() && rng() % 2) {  // extend or cut an existing key: shared prefixes, splits
      auto it = ref.begin();
      std::advance(it, static_cast<long>(rng() % ref.size()));
      k = it->first;
      k.resize(rng() % (k.size() + 1));
    }
    const size_t extra = rng() % 6;
    for (size_t i = 0; i < extra; ++i) k.push_back(static_cast<int32_t>(rng() % 3));
    return k;
  };
  for (int step = 0; step < 20000; ++step) {
    const std::vector<int32_t> k = random_key();
    const unsigned op = rng() % 10;
    if (op < 5) {
      const int v = step;
      tree.insert(k, v);
      ref[k] = v;
    } else if (op < 7) {
      tree.erase(k);
      ref.erase(k);
    } else {
      const size_t max_len = k.empty() ? 0 : rng() % (k.size() + 1);
      size_t got_len = 0, want_len = 0;
      const int* got = tree.longest_prefix(k.data(), k.size(), max_len, &got_len);
      const int* want = brute_longest(ref, k, max_len, &want_len);
      ASSERT_EQ(got == nullptr, want == nullptr) << "step " << step;
      if (want) {
        ASSERT_EQ(got_len, want_len) << "step " << step;
        ASSERT_EQ(*got, *want) << "step " << step;
      }
    }
    const int* f = tree.find(k);
    auto it = ref.find(k);
    ASSERT_EQ(f != nullptr, it != ref.end()) << "step " << step;
    if (f) {
      ASSERT_EQ(*f, it->second);
    }
    ASSERT_EQ(tree.size(), ref.size());
    ASSERT_LE(tree.nodes(), 2 * tree.size()) << "merged nodes are not left behind";
  }
  for (auto it = ref.begin(); it != ref.end(); it = ref.erase(it)) tree.erase(it->first);
  EXPECT_EQ(tree.size(), 0u);
  EXPECT_EQ(tree.nodes(), 0u);
}

TEST(PrefixTree, SplitAndMerge) {
  PrefixTree<int> t;
  t.insert({1, 2, 3, 4}, 1);
  EXPECT_EQ(t.nodes(), 1u);  // one edge
  t.insert({1, 2, 9}, 2);    // splits it at {1, 2}
  EXPECT_EQ(t.nodes(), 3u);
  t.insert({1, 2}, 3);  // the split point takes a value
  EXPECT_EQ(t.nodes(), 3u);
  size_t len = 0;
  const std::vector<int32_t> p = {1, 2, 3, 4, 5};
  EXPECT_EQ(*t.longest_prefix(p.data(), p.size(), 4, &len), 1);
  EXPECT_EQ(len, 4u);
  EXPECT_EQ(*t.longest_prefix(p.data(), p.size(), 3, &len), 3);  // {1, 2, 3, 4} is longer than allowed
  EXPECT_EQ(len, 2u);
  EXPECT_EQ(t.longest_prefix(p.data(), 1, 1, &len), nullptr);
  t.erase({1, 2, 9});  // {1, 2} keeps its value: no merge
  EXPECT_EQ(t.nodes(), 2u);
  t.erase({1, 2});  // now {1, 2} -> {3, 4} merges into one edge
  EXPECT_EQ(t.nodes(), 1u);
  EXPECT_EQ(*t.find({1, 2, 3, 4}), 1);
  EXPECT_EQ(t.find({1, 2}), nullptr);
}

}  // namespace
