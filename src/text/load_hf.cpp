// Hugging Face tokenizer.json (+ tokenizer_config.json) -> TokenizerData. Accepts exactly the byte-level BPE
// layout of the supported families: model BPE, normalizer none/NFC, pre_tokenizer Sequence[Split(<family regex>,
// Isolated), ByteLevel(use_regex=false)], decoder ByteLevel. Anything else is an Error naming the field.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <map>
#include <sstream>

#include "core/error.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"

namespace tern::text {
namespace {

using nlohmann::json;

struct Added {
  std::string content;
  bool special = false;
  bool normalized = false;
};

const json& field(const json& obj, const char* key, const std::string& where) {
  if (!obj.is_object()) fail("%s: expected an object", where.c_str());
  auto it = obj.find(key);
  if (it == obj.end()) fail("%s: missing field '%s'", where.c_str(), key);
  return *it;
}

bool flag(const json& obj, const char* key, bool dflt, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) fail("%s.%s: expected a boolean", where.c_str(), key);
  return it->get<bool>();
}

bool null_or_empty(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

std::string type_of(const json& obj, const std::string& where) {
  const json& t = field(obj, "type", where);
  if (!t.is_string()) fail("%s.type: expected a string", where.c_str());
  return t.get<std::string>();
}

bool parse_normalizer(const json& n, const std::string& src) {
  const std::string where = src + ": normalizer";
  if (n.is_null()) return false;
  std::string t = type_of(n, where);
  if (t == "NFC") return true;
  if (t == "Sequence") {
    const json& seq = field(n, "normalizers", where);
    if (seq.is_array() && seq.empty()) return false;
    if (seq.is_array() && seq.size() == 1) return parse_normalizer(seq[0], src);
  }
  fail("%s: type '%s' is not supported (supported: none, NFC)", where.c_str(), t.c_str());
}

// Returns the pre-tokenizer name whose HF regex the Split step carries.
std::string parse_pre_tokenizer(const json& p, const std::string& src) {
  const std::string where = src + ": pre_tokenizer";
  if (p.is_null() || type_of(p, where) != "Sequence") fail("%s: expected a Sequence [Split, ByteLevel]", where.c_str());
  const json& seq = field(p, "pretokenizers", where);
  if (!seq.is_array() || seq.size() != 2) fail("%s: expected exactly [Split, ByteLevel]", where.c_str());
  const json& split = seq[0];
  const json& bl = seq[1];
  if (type_of(split, where + "[0]") != "Split") fail("%s[0]: expected type Split", where.c_str());
  if (type_of(bl, where + "[1]") != "ByteLevel") fail("%s[1]: expected type ByteLevel", where.c_str());
  if (flag(bl, "add_prefix_space", false, where + "[1]") || flag(bl, "use_regex", true, where + "[1]"))
    fail("%s[1]: ByteLevel must have add_prefix_space=false and use_regex=false", where.c_str());
  const json& behavior = field(split, "behavior", where + "[0]");
  if (behavior != "Isolated" || flag(split, "invert", false, where + "[0]"))
    fail("%s[0]: Split must have behavior Isolated and invert=false", where.c_str());
  const json& pat = field(split, "pattern", where + "[0]");
  auto re = pat.find("Regex");
  if (re == pat.end() || !re->is_string()) fail("%s[0].pattern: expected {\"Regex\": ...}", where.c_str());
  std::string regex = re->get<std::string>();
  // The contractions may be spelled case by case instead of with (?i:...) (llama.cpp's glm4 spelling): the same
  // matches for these ASCII letters.
  static const std::string kExplicitCase = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
  if (regex.rfind(kExplicitCase, 0) == 0) regex = "(?i:'s|'t|'re|'ve|'m|'ll|'d)" + regex.substr(kExplicitCase.size());
  for (PreType t : {PreType::kQwen35, PreType::kQwen2, PreType::kGlm4})
    if (PreTokenizer::hf_regex(t) == regex) return pre_type_name(t);
  fail("%s[0]: split regex '%s' is not one of the supported pre-tokenizers (qwen35, qwen2, glm4)",
       where.c_str(), regex.c_str());
}

void parse_bpe_model(const json& m, const std::string& src, TokenizerData* d, std::map<int32_t, std::string>* ids) {
  const std::string where = src + ": model";
  if (type_of(m, where) != "BPE") fail("%s.type: '%s' is not supported (supported: BPE)", where.c_str(),
                                        type_of(m, where).c_str());
  if (!null_or_empty(m, "dropout")) fail("%s.dropout: BPE dropout is not supported", where.c_str());
  if (!null_or_empty(m, "continuing_subword_prefix") || !null_or_empty(m, "end_of_word_suffix"))
    fail("%s: continuing_subword_prefix / end_of_word_suffix are not supported", where.c_str());
  if (flag(m, "byte_fallback", false, where)) fail("%s.byte_fallback: not supported", where.c_str());
  d->ignore_merges = flag(m, "ignore_merges", false, where);
  const json& vocab = field(m, "vocab", where);
  if (!vocab.is_object()) fail("%s.vocab: expected an object {token: id}", where.c_str());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX)
      fail("%s.vocab['%s']: expected a non-negative integer id", where.c_str(), it.key().c_str());
    if (!ids->emplace(it.value().get<int32_t>(), it.key()).second)
      fail("%s.vocab: id %d used twice", where.c_str(), it.value().get<int32_t>());
  }
  const json& merges = field(m, "merges", where);
  if (!merges.is_array()) fail("%s.merges: expected an array", where.c_str());
  d->merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    if (e.is_string()) d->merges.push_back(e.get<std::string>());  // legacy "left right"
    else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string())
      d->merges.push_back(e[0].get<std::string>() + " " + e[1].get<std::string>());
    else fail("%s.merges[%zu]: expected \"left right\" or [left, right]", where.c_str(), i);
  }
}

void parse_added(const json& t, const std::string& where, std::map<int32_t, Added>* added) {
  const json& c = field(t, "content", where);
  if (!c.is_string() || c.get<std::string>().empty()) fail("%s.content: expected a non-empty string", where.c_str());
  for (const char* k : {"lstrip", "rstrip", "single_word"})
    if (flag(t, k, false, where)) fail("%s ('%s'): %s=true is not supported", where.c_str(),
                                       c.get<std::string>().c_str(), k);
  Added a{c.get<std::string>(), flag(t, "special", false, where), flag(t, "normalized", false, where)};
  const json& idj = field(t, "id", where);
  if (!idj.is_number_integer() || idj.get<int64_t>() < 0 || idj.get<int64_t>() > INT32_MAX)
    fail("%s.id: expected a non-negative integer", where.c_str());
  auto [it, fresh] = added->emplace(idj.get<int32_t>(), a);
  if (!fresh && (it->second.content != a.content || it->second.special != a.special))
    fail("%s: id %d is '%s' here but '%s' elsewhere", where.c_str(), it->first, a.content.c_str(),
         it->second.content.c_str());
}

// tokenizer_config.json special-token entries are a string, {"content": ...}, or null.
int32_t special_id(const json& cfg, const char* key, const TokenizerData& d, const std::string& src) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return -1;
  const json& v = it->is_object() ? field(*it, "content", src + ": " + key) : *it;
  if (!v.is_string()) fail("%s: %s: expected a string", src.c_str(), key);
  for (size_t i = 0; i < d.tokens.size(); ++i)
    if (d.tokens[i] == v.get<std::string>()) return int32_t(i);
  fail("%s: %s '%s' is not a token", src.c_str(), key, v.get<std::string>().c_str());
}

json parse_json(std::string_view text, const std::string& src) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("%s: invalid JSON: %s", src.c_str(), e.what());
  }
}

// tokenizer_config.json "added_tokens_decoder": {"<id>": {content, special, ...}} (same fields as added_tokens).
void parse_config_added(const json& cfg, const std::string& csrc, std::map<int32_t, Added>* added) {
  if (!cfg.is_object()) fail("%s: expected a JSON object", csrc.c_str());
  auto it = cfg.find("added_tokens_decoder");
  if (it == cfg.end() || it->is_null()) return;
  if (!it->is_object()) fail("%s: added_tokens_decoder: expected an object", csrc.c_str());
  for (auto e = it->begin(); e != it->end(); ++e) {
    const std::string where = csrc + ": added_tokens_decoder['" + e.key() + "']";
    char* end = nullptr;
    const long long id = std::strtoll(e.key().c_str(), &end, 10);
    if (e.key().empty() || *end != '\0') fail("%s: key is not a token id", where.c_str());
    json t = e.value();
    if (!t.is_object()) fail("%s: expected an object", where.c_str());
    t["id"] = id;
    parse_added(t, where, added);
  }
}

void apply_config_specials(const json& cfg, const std::string& csrc, TokenizerData* d) {
  d->bos_id = special_id(cfg, "bos_token", *d, csrc);
  d->eos_id = special_id(cfg, "eos_token", *d, csrc);
  d->pad_id = special_id(cfg, "pad_token", *d, csrc);
  d->add_bos = flag(cfg, "add_bos_token", false, csrc);
}

}  // namespace

TokenizerData parse_hf_tokenizer(std::string_view tokenizer_json, std::string_view config_json,
                                 const std::string& source) {
  const json j = parse_json(tokenizer_json, source);
  if (!j.is_object()) fail("%s: expected a JSON object", source.c_str());
  TokenizerData d;
  d.source = source;
  std::map<int32_t, std::string> ids;
  parse_bpe_model(field(j, "model", source), source, &d, &ids);
  d.nfc = parse_normalizer(j.value("normalizer", json()), source);
  d.pre = parse_pre_tokenizer(j.value("pre_tokenizer", json()), source);
  const json dec = j.value("decoder", json());
  if (dec.is_null() || type_of(dec, source + ": decoder") != "ByteLevel")
    fail("%s: decoder: expected type ByteLevel", source.c_str());

  std::map<int32_t, Added> added;
  if (auto it = j.find("added_tokens"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) fail("%s: added_tokens: expected an array", source.c_str());
    for (size_t i = 0; i < it->size(); ++i) parse_added((*it)[i], strf("%s: added_tokens[%zu]", source.c_str(), i),
                                                        &added);
  }
  const std::string csrc = source + " (tokenizer_config.json)";
  json cfg = config_json.empty() ? json::object() : parse_json(config_json, csrc);
  parse_config_added(cfg, csrc, &added);

  for (const auto& [id, a] : added) {
    auto [it, fresh] = ids.emplace(id, a.content);
    if (!fresh && it->second != a.content)
      fail("%s: added token %d '%s' clashes with vocab entry '%s'", source.c_str(), id, a.content.c_str(),
           it->second.c_str());
  }
  const size_t n = ids.empty() ? 0 : size_t(ids.rbegin()->first) + 1;
  if (ids.size() != n) {
    int32_t expect = 0;
    for (const auto& kv : ids) {
      if (kv.first != expect) break;
      ++expect;
    }
    fail("%s: token ids are not contiguous: no token has id %d (%zu tokens, largest id %zu)", source.c_str(),
         expect, ids.size(), n - 1);
  }
  d.tokens.reserve(n);
  d.token_type.assign(n, int32_t(TokenType::kNormal));
  d.added_normalized.assign(n, false);
  for (auto& [id, text] : ids) d.tokens.push_back(std::move(text));
  for (const auto& [id, a] : added) {
    d.token_type[size_t(id)] = int32_t(a.special ? TokenType::kControl : TokenType::kUserDefined);
    d.added_normalized[size_t(id)] = a.normalized;
  }
  apply_config_specials(cfg, csrc, &d);
  return d;
}

static std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("%s: cannot open", path.c_str());
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("%s: read error", path.c_str());
  return ss.str();
}

TokenizerData load_hf_tokenizer(const std::string& tokenizer_path, const std::string& config_path) {
  std::string cfg_path = config_path;
  if (cfg_path.empty()) {
    auto p = std::filesystem::path(tokenizer_path).parent_path() / "tokenizer_config.json";
    if (std::filesystem::exists(p)) cfg_path = p.string();
  }
  const std::string tok = read_text_file(tokenizer_path);
  const std::string cfg = cfg_path.empty() ? std::string() : read_text_file(cfg_path);
  return parse_hf_tokenizer(tok, cfg, tokenizer_path);
}

}  // namespace tern::text
