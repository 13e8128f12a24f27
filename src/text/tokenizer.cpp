// Tokenizer: validation of TokenizerData, added-token splitting (HF AddedVocabulary: leftmost-longest match of
// the literal token text; non-normalised tokens on the raw text, normalised ones after the normaliser), NFC via
// utf8proc, then pre-tokenizer + BPE per piece. Decoding uses a per-id byte table built at load time.
#include "text/tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

#include "core/error.h"
#include "text/bpe.h"
#include "text/pretokenize.h"
#include "text/utf8.h"

namespace tern::text {

namespace {

struct AddedToken {
  std::string text;
  int32_t id;
  bool special;  // CONTROL / UNKNOWN: matched only with parse_special
};

// Added tokens grouped by first byte, longest first, so the first hit at a position is the longest match.
class AddedMatcher {
 public:
  void add(AddedToken t) { by_first_[uint8_t(t.text[0])].push_back(std::move(t)); }
  void finish() {
    for (auto& v : by_first_)
      std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.text.size() > b.text.size(); });
  }
  bool empty() const {
    return std::all_of(by_first_.begin(), by_first_.end(), [](auto& v) { return v.empty(); });
  }
  const AddedToken* match(std::string_view s, size_t i, bool parse_special) const {
    for (const AddedToken& t : by_first_[uint8_t(s[i])])
      if ((parse_special || !t.special) && s.compare(i, t.text.size(), t.text) == 0) return &t;
    return nullptr;
  }

 private:
  std::array<std::vector<AddedToken>, 256> by_first_;
};

// Calls gap(text) for unmatched spans and tok(id) for matched added tokens, left to right.
template <class Gap, class Tok>
void split_added(std::string_view s, const AddedMatcher& m, bool parse_special, Gap&& gap, Tok&& tok) {
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    if (const AddedToken* t = m.match(s, i, parse_special)) {
      if (i > start) gap(s.substr(start, i - start));
      tok(t->id);
      i += t->text.size();
      start = i;
    } else {
      ++i;
    }
  }
  if (start < s.size()) gap(s.substr(start));
}

std::string nfc(std::string_view s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          utf8proc_ssize_t(s.size()), &out, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("tokenizer: NFC normalisation failed: %s", utf8proc_errmsg(n));
  std::string r(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return r;
}

bool is_added_type(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}

}  // namespace

struct Tokenizer::Impl {
  TokenizerData d;
  PreType pre;
  std::unordered_map<std::string, int32_t> vocab;  // stored form -> id (first occurrence)
  std::vector<std::string> bytes;                  // [n_vocab] decoded bytes of each token
  AddedMatcher added_raw, added_norm;              // matched before / after normalisation
  std::unique_ptr<PreTokenizer> pretok;
  std::unique_ptr<BpeModel> bpe;

  explicit Impl(TokenizerData data);
  void check_id(int32_t id, const char* what) const;
  void encode_text(std::string_view s, bool parse_special, std::vector<int32_t>* out) const;
};

void Tokenizer::Impl::check_id(int32_t id, const char* what) const {
  if (id < -1 || id >= int32_t(d.tokens.size()))
    fail("%s: %s id %d out of range (vocabulary has %zu tokens)", d.source.c_str(), what, id, d.tokens.size());
}

Tokenizer::Impl::Impl(TokenizerData data) : d(std::move(data)) {
  const std::string& src = d.source;
  const size_t n = d.tokens.size();
  if (n == 0) fail("%s: tokenizer has no tokens", src.c_str());
  if (n > size_t(INT32_MAX)) fail("%s: %zu tokens, more than int32 ids allow", src.c_str(), n);
  if (d.token_type.empty()) d.token_type.assign(n, int32_t(TokenType::kNormal));
  if (d.token_type.size() != n)
    fail("%s: %zu token types for %zu tokens", src.c_str(), d.token_type.size(), n);
  if (!d.added_normalized.empty() && d.added_normalized.size() != n)
    fail("%s: %zu added-token normalisation flags for %zu tokens", src.c_str(), d.added_normalized.size(), n);
  pre = parse_pre_type(d.pre);
  check_id(d.bos_id, "bos");
  check_id(d.eos_id, "eos");
  check_id(d.eot_id, "eot");
  check_id(d.eom_id, "eom");
  check_id(d.pad_id, "pad");
  if (d.add_bos && d.bos_id < 0) fail("%s: add_bos is set but there is no bos token", src.c_str());

  const ByteMap& bm = byte_map();
  vocab.reserve(n);
  bytes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int32_t ty = d.token_type[i];
    if (ty < 1 || ty > 6) fail("%s: token %zu ('%s'): token type %d, expected 1..6", src.c_str(), i,
                               d.tokens[i].c_str(), ty);
    vocab.try_emplace(d.tokens[i], int32_t(i));
    const TokenType t = TokenType(ty);
    // Added tokens decode to their literal text; normal tokens through the byte map. A normal token with a
    // character outside the map keeps its raw text, as HF's ByteLevel decoder does.
    if (is_added_type(t) || t == TokenType::kUnused || !bm.decode(d.tokens[i], &bytes[i])) bytes[i] = d.tokens[i];
    if (is_added_type(t) && !d.tokens[i].empty()) {
      AddedToken a{d.tokens[i], int32_t(i), t != TokenType::kUserDefined};
      if (!d.added_normalized.empty() && d.added_normalized[i]) added_norm.add(std::move(a));
      else added_raw.add(std::move(a));
    }
  }
  added_raw.finish();
  added_norm.finish();
  pretok = std::make_unique<PreTokenizer>(pre);
  bpe = std::make_unique<BpeModel>(vocab, d.merges, d.ignore_merges, src);
}

void Tokenizer::Impl::encode_text(std::string_view s, bool parse_special, std::vector<int32_t>* out) const {
  std::vector<std::string_view> pieces;
  auto bpe_gap = [&](std::string_view g) {
    pieces.clear();
    pretok->split(g, &pieces);
    for (std::string_view p : pieces) bpe->encode(p, out);
  };
  auto emit = [&](int32_t id) { out->push_back(id); };
  auto raw_gap = [&](std::string_view g) {
    if (!d.nfc && added_norm.empty()) return bpe_gap(g);
    const std::string normed = d.nfc ? nfc(g) : std::string(g);
    split_added(normed, added_norm, parse_special, bpe_gap, emit);
  };
  split_added(s, added_raw, parse_special, raw_gap, emit);
}

Tokenizer::Tokenizer(TokenizerData data) : impl_(std::make_unique<Impl>(std::move(data))) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  for (size_t i = 0; i < text.size();) {
    Utf8Step st = utf8_step(text, i);
    if (st.status != Utf8Status::kValid) fail("tokenizer: input text is not valid UTF-8 at byte %zu", i);
    i += st.n;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  impl_->encode_text(text, parse_special, &out);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special) {
      const TokenType t = token_type(id);
      if (t == TokenType::kControl || t == TokenType::kUnknown) continue;
    }
    out += token_bytes(id);
  }
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= n_vocab()) fail("tokenizer: token id %d out of range [0, %d)", id, n_vocab());
  return impl_->bytes[size_t(id)];
}

int32_t Tokenizer::n_vocab() const { return int32_t(impl_->d.tokens.size()); }

const std::string& Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= n_vocab()) fail("tokenizer: token id %d out of range [0, %d)", id, n_vocab());
  return impl_->d.tokens[size_t(id)];
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= n_vocab()) fail("tokenizer: token id %d out of range [0, %d)", id, n_vocab());
  return TokenType(impl_->d.token_type[size_t(id)]);
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  auto it = impl_->vocab.find(std::string(text));
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}

PreType Tokenizer::pre_type() const { return impl_->pre; }
int32_t Tokenizer::bos_id() const { return impl_->d.bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->d.eos_id; }
int32_t Tokenizer::eot_id() const { return impl_->d.eot_id; }
int32_t Tokenizer::eom_id() const { return impl_->d.eom_id; }
int32_t Tokenizer::pad_id() const { return impl_->d.pad_id; }
bool Tokenizer::add_bos() const { return impl_->d.add_bos; }

}  // namespace tern::text
