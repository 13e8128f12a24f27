// A radix tree over token sequences: each edge holds a run of tokens, each node may hold a value for the key that
// ends there, and nodes with no value and a single child are merged away, so the tree has at most two nodes per
// key. The prefix cache looks up the longest cached prefix of a prompt in time linear in the prompt's length
// (walking one edge per branching point), not by scanning every entry. Not thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace tern::serve {

template <class V>
class PrefixTree {
 public:
  // The value of the longest key that is a prefix of tokens[0..n) and at most max_len long (null: none); its
  // length goes to *len.
  V* longest_prefix(const int32_t* tokens, size_t n, size_t max_len, size_t* len) {
    Node* node = &root_;
    size_t depth = 0;
    V* best = nullptr;
    *len = 0;
    for (;;) {
      if (node->value && depth <= max_len) {
        best = &*node->value;
        *len = depth;
      }
      if (depth >= n || depth >= max_len) return best;
      auto it = node->children.find(tokens[depth]);
      if (it == node->children.end()) return best;
      Node* child = it->second.get();
      const size_t e = child->edge.size();
      if (depth + e > n) return best;  // the key runs past the tokens
      for (size_t i = 1; i < e; ++i)   // edge[0] matched through the map
        if (child->edge[i] != tokens[depth + i]) return best;
      depth += e;
      node = child;
    }
  }

  V* find(const std::vector<int32_t>& key) {
    Node* node = walk(key);
    return node && node->value ? &*node->value : nullptr;
  }
  const V* find(const std::vector<int32_t>& key) const { return const_cast<PrefixTree*>(this)->find(key); }

  // Sets the value of `key` (replacing one already there); returns it.
  V& insert(const std::vector<int32_t>& key, V value) {
    Node* node = &root_;
    size_t depth = 0;
    while (depth < key.size()) {
      auto it = node->children.find(key[depth]);
      if (it == node->children.end()) {  // a new leaf with the rest of the key
        auto leaf = std::make_unique<Node>();
        leaf->edge.assign(key.begin() + static_cast<std::ptrdiff_t>(depth), key.end());
        leaf->parent = node;
        node = (node->children[key[depth]] = std::move(leaf)).get();
        ++nodes_;
        depth = key.size();
        break;
      }
      Node* child = it->second.get();
      size_t common = 1;
      while (common < child->edge.size() && depth + common < key.size() &&
             child->edge[common] == key[depth + common])
        ++common;
      if (common < child->edge.size()) {  // split the edge: node -> mid (common part) -> child (the rest)
        auto mid = std::make_unique<Node>();
        mid->edge.assign(child->edge.begin(), child->edge.begin() + static_cast<std::ptrdiff_t>(common));
        mid->parent = node;
        std::unique_ptr<Node> owned = std::move(it->second);
        owned->edge.erase(owned->edge.begin(), owned->edge.begin() + static_cast<std::ptrdiff_t>(common));
        owned->parent = mid.get();
        const int32_t first = owned->edge[0];
        mid->children[first] = std::move(owned);
        it->second = std::move(mid);
        ++nodes_;
        child = it->second.get();
      }
      depth += common;
      node = child;
    }
    if (!node->value) ++size_;
    node->value = std::move(value);
    return *node->value;
  }

  // Removes key's value (no-op when absent) and the nodes that no longer carry a key.
  void erase(const std::vector<int32_t>& key) {
    Node* node = walk(key);
    if (!node || !node->value) return;
    node->value.reset();
    --size_;
    prune(node);
  }

  size_t size() const { return size_; }    // keys held
  size_t nodes() const { return nodes_; }  // nodes besides the root (<= 2 x size())

 private:
  struct Node {
    std::vector<int32_t> edge;  // the tokens from the parent to this node
    std::map<int32_t, std::unique_ptr<Node>> children;  // by the first token of their edge
    Node* parent = nullptr;
    std::optional<V> value;
  };

  Node* walk(const std::vector<int32_t>& key) {
    Node* node = &root_;
    size_t depth = 0;
    while (depth < key.size()) {
      auto it = node->children.find(key[depth]);
      if (it == node->children.end()) return nullptr;
      Node* child = it->second.get();
      if (depth + child->edge.size() > key.size()) return nullptr;
      for (size_t i = 1; i < child->edge.size(); ++i)
        if (child->edge[i] != key[depth + i]) return nullptr;
      depth += child->edge.size();
      node = child;
    }
    return node;
  }

  // A node without a value goes when it has no children, and merges with its only child when it has one.
  void prune(Node* node) {
    while (node != &root_ && !node->value) {
      Node* parent = node->parent;
      auto& slot = parent->children.at(node->edge[0]);
      if (node->children.empty()) {
        parent->children.erase(node->edge[0]);  // destroys node
        --nodes_;
        node = parent;
        continue;
      }
      if (node->children.size() == 1) {
        std::unique_ptr<Node> only = std::move(node->children.begin()->second);
        only->edge.insert(only->edge.begin(), node->edge.begin(), node->edge.end());
        only->parent = parent;
        slot = std::move(only);  // destroys node
        --nodes_;
      }
      return;
    }
  }

  Node root_;
  size_t size_ = 0, nodes_ = 0;
};

}  // namespace tern::serve
