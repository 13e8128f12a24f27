// BPE merge loop as in HF tokenizers' BPE::merge_word: a min-heap of candidate pairs ordered by (rank, position);
// a popped candidate is applied only if both symbols are still present and unchanged.
#include "text/bpe.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "text/utf8.h"

namespace tern::text {

static void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

ByteMap::ByteMap() {
  byte_of_cp_.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int cp = self ? b : next++;
    append_utf8(char32_t(cp), &utf8_[b]);
    byte_of_cp_[cp] = int16_t(b);
  }
}

bool ByteMap::decode(std::string_view text, std::string* out) const {
  for (size_t i = 0; i < text.size();) {
    Utf8Step st = utf8_step(text, i);
    if (st.status != Utf8Status::kValid) return false;
    char32_t cp = utf8_decode(text, i, st.n);
    if (cp >= byte_of_cp_.size() || byte_of_cp_[cp] < 0) return false;
    out->push_back(char(byte_of_cp_[cp]));
    i += st.n;
  }
  return true;
}

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

BpeModel::BpeModel(const std::unordered_map<std::string, int32_t>& vocab, const std::vector<std::string>& merges,
                   bool ignore_merges, const std::string& source)
    : vocab_(vocab), ignore_merges_(ignore_merges) {
  const ByteMap& bm = byte_map();
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(bm.encode(uint8_t(b)));
    if (it == vocab.end())
      fail("%s: vocabulary has no token for byte 0x%02X (stand-in '%s'); not a byte-level BPE vocabulary",
           source.c_str(), b, bm.encode(uint8_t(b)).c_str());
    byte_token_[b] = it->second;
  }
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& m = merges[r];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() || m.find(' ', sp + 1) != std::string::npos)
      fail("%s: merges[%zu] = '%s': expected \"left right\" (one space)", source.c_str(), r, m.c_str());
    const std::string left = m.substr(0, sp), right = m.substr(sp + 1);
    auto a = vocab.find(left), b = vocab.find(right), ab = vocab.find(left + right);
    if (a == vocab.end() || b == vocab.end() || ab == vocab.end())
      fail("%s: merges[%zu] = '%s': token '%s' is not in the vocabulary", source.c_str(), r, m.c_str(),
           (a == vocab.end() ? left : b == vocab.end() ? right : left + right).c_str());
    merges_.try_emplace(key(a->second, b->second), Merge{int32_t(r), ab->second});  // first (lowest) rank wins
  }
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    std::string mapped;
    for (char c : piece) mapped += byte_map().encode(uint8_t(c));
    if (auto it = vocab_.find(mapped); it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1) {
    out->push_back(byte_token_[uint8_t(piece[0])]);
    return;
  }
  // Symbols: one per byte, as a doubly linked list over positions; a merged-away symbol gets id -1. Scratch
  // buffers are per thread and reused, since most pieces are short.
  struct Cand {
    int32_t rank, pos, left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  struct Scratch {
    std::vector<int32_t> id, prev, next;
    std::vector<Cand> heap;
  };
  thread_local Scratch sc;
  const int n = int(piece.size());
  std::vector<int32_t>&id = sc.id, &prev = sc.prev, &next = sc.next;
  id.resize(size_t(n));
  prev.resize(size_t(n));
  next.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    id[i] = byte_token_[uint8_t(piece[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<Cand>& heap = sc.heap;  // min-heap by (rank, pos) via std::push_heap / pop_heap with greater<>
  heap.clear();
  auto push = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(key(id[pos], id[next[pos]]));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, pos, id[pos], id[next[pos]], it->second.id});
    std::push_heap(heap.begin(), heap.end(), std::greater<Cand>());
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Cand>());
    const Cand c = heap.back();
    heap.pop_back();
    const int r = next[c.pos];
    if (id[c.pos] != c.left || r < 0 || id[r] != c.right) continue;  // stale candidate
    id[c.pos] = c.merged;
    id[r] = -1;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = next[i]) out->push_back(id[i]);
}

}  // namespace tern::text
