// tokenizer.* keys from tokenizer.json / tokenizer_config.json / config.json, following llama.cpp's
// TextModel._set_vocab_gpt2 (get_vocab_base) and gguf-py SpecialVocab, plus _set_vocab_glm's special tokens for
// glm-dsa. tokenizer.ggml.pre: llama.cpp hashes the token ids of a fixed probe string; we cannot tokenize here, so
// the pre-tokenizer's Split regex is matched against the regexes of the supported families (qwen2, qwen35, glm4).
// --vocab-pre overrides (docs/CONVERT.md).
#include <fstream>
#include <iterator>
#include <map>

#include "convert/metadata.h"
#include "core/error.h"

namespace tern::convert {

namespace {

constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// GLM-4/GLM-5 (llama.cpp pre "glm4", type CHATGLM4): digits grouped 1-3, no \p{M} rule; the contractions
// written either with (?i:...) or, as llama.cpp's CHATGLM4 regex spells them, with explicit case classes.
constexpr const char* kGlm4Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kGlm4RegexCased =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen35Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

bool starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
bool ends(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// TextModel.does_token_look_special.
bool looks_special(const std::string& t) {
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (starts(t, "<|") && ends(t, "|>")) return true;
  if (starts(t, "<\xEF\xBD\x9C") && ends(t, "\xEF\xBD\x9C>")) return true;  // fullwidth bar (deepseek)
  return starts(t, "<unused") && ends(t, ">");
}

std::string detect_pre(const OJson& tok, const std::string& file) {
  std::vector<std::string> regexes;
  const OJson* pt = tok.contains("pre_tokenizer") ? &tok["pre_tokenizer"] : nullptr;
  if (pt && pt->is_object()) {
    std::vector<const OJson*> items;
    if (pt->contains("pretokenizers") && (*pt)["pretokenizers"].is_array())
      for (const auto& p : (*pt)["pretokenizers"]) items.push_back(&p);
    else items.push_back(pt);
    for (const OJson* p : items)
      if (p->value("type", "") == "Split" && p->contains("pattern") && (*p)["pattern"].contains("Regex"))
        regexes.push_back((*p)["pattern"]["Regex"].get<std::string>());
  }
  if (regexes.size() == 1 && regexes[0] == kQwen2Regex) return "qwen2";
  if (regexes.size() == 1 && regexes[0] == kQwen35Regex) return "qwen35";
  if (regexes.size() == 1 && (regexes[0] == kGlm4Regex || regexes[0] == kGlm4RegexCased)) return "glm4";
  fail("%s: pre-tokenizer not recognised (known: the qwen2, qwen35 and glm4 Split regexes); pass --vocab-pre NAME",
       file.c_str());
}

const char* id_key(const std::string& typ) {
  static const std::map<std::string, const char*> k = {
      {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
      {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
      {"pad", "tokenizer.ggml.padding_token_id"}, {"mask", "tokenizer.ggml.mask_token_id"},
      {"eot", "tokenizer.ggml.eot_token_id"},     {"eom", "tokenizer.ggml.eom_token_id"},
  };
  auto it = k.find(typ);
  return it == k.end() ? nullptr : it->second;  // cls has no writer handler in gguf-py: skipped
}

void add_tokens(KeyValues& kv, const Checkpoint& ck, const OJson& tok, const std::string& file) {
  const int64_t n_vocab = ck.hp.n_vocab;
  std::map<int64_t, std::string> rev;
  if (!tok.contains("model") || !tok["model"].contains("vocab") || !tok["model"]["vocab"].is_object())
    fail("%s: no model.vocab object (only BPE tokenizers are supported)", file.c_str());
  if (tok["model"].value("type", "BPE") != "BPE") fail("%s: tokenizer model is not BPE", file.c_str());
  for (auto& [t, id] : tok["model"]["vocab"].items()) {
    if (!id.is_number_integer()) fail("%s: vocab['%s'] is not an integer id", file.c_str(), t.c_str());
    rev[id.get<int64_t>()] = t;
  }
  std::map<int64_t, bool> added_special;  // id -> special
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
    for (const auto& a : tok["added_tokens"]) {
      const int64_t id = a.value("id", int64_t{-1});
      if (id < 0 || !a.contains("content")) fail("%s: malformed added_tokens entry %s", file.c_str(), a.dump().c_str());
      rev[id] = a["content"].get<std::string>();
      added_special[id] = a.value("special", false);
    }
  if (!rev.empty() && rev.rbegin()->first >= n_vocab)
    fail("%s: token id %lld >= vocab_size %lld", file.c_str(), static_cast<long long>(rev.rbegin()->first),
         static_cast<long long>(n_vocab));
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int64_t i = 0; i < n_vocab; ++i) {
    auto it = rev.find(i);
    if (it == rev.end()) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(5);  // UNUSED
      continue;
    }
    std::string t = it->second;
    auto ad = added_special.find(i);
    if (ad == added_special.end()) {
      types.push_back(1);  // NORMAL
    } else if (ad->second || looks_special(t)) {
      types.push_back(3);  // CONTROL
    } else {
      // U+2581 -> ' ', copied rather than replace()d in place (GCC 12's false -Wrestrict in replace).
      std::string u;
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, 3, "\xE2\x96\x81") == 0) {
          u += ' ';
          k += 3;
        } else {
          u += t[k++];
        }
      }
      t = std::move(u);
      types.push_back(4);  // USER_DEFINED
    }
    tokens.push_back(std::move(t));
  }
  kv.emplace_back("tokenizer.ggml.tokens", gguf::Node::array_of_str(tokens));
  kv.emplace_back("tokenizer.ggml.token_type", gguf::Node::array_of<int32_t>(types));
}

std::vector<std::string> merges(const OJson& tok, const std::string& file) {
  std::vector<std::string> out;
  const OJson& m = tok["model"].contains("merges") ? tok["model"]["merges"] : OJson();
  if (!m.is_array()) return out;
  for (const auto& e : m) {
    if (e.is_string()) {
      out.push_back(e.get<std::string>());
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      std::string s;
      for (int k = 0; k < 2; ++k) {
        if (k) s += ' ';
        for (char ch : e[k].get<std::string>()) s += ch == ' ' ? std::string("\xC4\xA0") : std::string(1, ch);  // U+0120
      }
      out.push_back(std::move(s));
    } else {
      fail("%s: unknown merges format", file.c_str());
    }
  }
  return out;
}

// The id of the first (or the last) entry of added_tokens with this content, or null; an entry without an "id" is
// no match (not an undefined lookup).
const OJson* added_id(const OJson& added, const std::string& content, bool last = false) {
  const OJson* found = nullptr;
  if (!added.is_array()) return found;
  for (const auto& a : added)
    if (a.is_object() && a.value("content", "") == content)
      if (const auto it = a.find("id"); it != a.end()) {
        found = &*it;
        if (!last) break;
      }
  return found;
}

KeyValues build_vocab_checked(const Checkpoint& ck, const VocabOptions& vo) {
  KeyValues kv;
  const std::string tfile = ck.dir + "/tokenizer.json";
  const OJson tok = read_json_file(tfile);
  const std::string cfile = ck.dir + "/tokenizer_config.json";
  OJson tc = file_exists(cfile) ? read_json_file(cfile) : OJson();
  kv.emplace_back("tokenizer.ggml.model", gguf::Node::str("gpt2"));
  kv.emplace_back("tokenizer.ggml.pre", gguf::Node::str(vo.pre.empty() ? detect_pre(tok, tfile) : vo.pre));
  add_tokens(kv, ck, tok, tfile);
  if (auto mg = merges(tok, tfile); !mg.empty()) kv.emplace_back("tokenizer.ggml.merges", gguf::Node::array_of_str(mg));

  // Special token ids: tokenizer_config first, then config.json, first one set wins (SpecialVocab).
  const std::vector<std::string> types = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  std::vector<std::pair<std::string, int64_t>> ids;
  std::vector<std::pair<std::string, bool>> add;
  auto set_id = [&](const std::string& typ, const OJson& v) {
    if (!v.is_number_integer()) return;
    if (v.get<int64_t>() < 0) fail("invalid value for special token type %s: %s", typ.c_str(), v.dump().c_str());
    for (auto& p : ids)
      if (p.first == typ) return;
    ids.emplace_back(typ, v.get<int64_t>());
  };
  auto set_add = [&](const std::string& typ, bool v, bool overwrite) {
    for (auto& p : add)
      if (p.first == typ) {
        if (overwrite) p.second = v;
        return;
      }
    add.emplace_back(typ, v);
  };
  if (tok.contains("post_processor") && tok["post_processor"].is_object()) {
    const OJson& pp = tok["post_processor"];
    std::vector<const OJson*> procs;
    if (pp.contains("processors") && pp["processors"].is_array()) for (const auto& p : pp["processors"]) procs.push_back(&p);
    else procs.push_back(&pp);
    for (const OJson* p : procs) {
      const std::string ty = p->value("type", "");
      if (ty == "ByteLevel") set_add("bos", false, false), set_add("eos", false, false);
      else fail("%s: post_processor type '%s' is not supported (supported: ByteLevel)", tfile.c_str(), ty.c_str());
    }
  }
  if (tc.is_object()) {
    const OJson added = tok.contains("added_tokens") ? tok["added_tokens"] : OJson::array();
    for (const std::string& typ : types) {
      if (auto it = tc.find("add_" + typ + "_token"); it != tc.end() && it->is_boolean()) set_add(typ, it->get<bool>(), false);
      auto e = tc.find(typ + "_token");
      if (e == tc.end()) continue;
      std::string content;
      if (e->is_string()) content = e->get<std::string>();
      else if (e->is_object() && e->contains("content") && (*e)["content"].is_string()) content = (*e)["content"].get<std::string>();
      else continue;
      if (const OJson* id = added_id(added, content)) set_id(typ, *id);
    }
  }
  const OJson& cfg = ck.config_json;  // SpecialVocab reads config.json as written: the root, then text_config
  for (const std::string& typ : types) {
    OJson id = cfg.value(typ + "_token_id", OJson());
    if (id.is_null() && cfg.contains("text_config") && cfg["text_config"].is_object())
      id = cfg["text_config"].value(typ + "_token_id", OJson());
    set_id(typ, id);
  }
  // _set_vocab_glm: bos [gMASK], eot <|user|>, unk <|endoftext|>, eom <|observation|> from the added tokens, each
  // only where SpecialVocab left the type unset (its _set_special_token keeps the first value).
  if (ck.hp.glm()) {
    const OJson added = tok.contains("added_tokens") ? tok["added_tokens"] : OJson::array();
    for (const auto& [typ, content] : {std::pair<const char*, const char*>{"bos", "[gMASK]"}, {"eot", "<|user|>"},
                                       {"unk", "<|endoftext|>"}, {"eom", "<|observation|>"}}) {
      const OJson* id = added_id(added, content, /*last=*/true);  // get_added_vocab(): a dict, the last one wins
      if (!id) fail("%s: no added token '%s' (GLM's %s token)", tfile.c_str(), content, typ);
      set_id(typ, *id);
    }
  }
  for (auto& [typ, id] : ids)
    if (const char* k = id_key(typ)) kv.emplace_back(k, gguf::Node::u32(static_cast<uint32_t>(id)));
  for (auto& [typ, v] : add)
    if (typ == "bos" || typ == "eos" || typ == "sep") kv.emplace_back("tokenizer.ggml.add_" + typ + "_token", gguf::Node::boolean(v));

  // Chat template: tokenizer_config's chat_template, else chat_template.jinja, else chat_template.json.
  if (tc.is_object()) {
    OJson tmpl;
    if (tc.contains("chat_template")) {
      tmpl = tc["chat_template"];
    } else if (file_exists(ck.dir + "/chat_template.jinja")) {
      std::ifstream in(ck.dir + "/chat_template.jinja", std::ios::binary);
      tmpl = std::string(std::istreambuf_iterator<char>(in), {});
    } else if (file_exists(ck.dir + "/chat_template.json")) {
      OJson j = read_json_file(ck.dir + "/chat_template.json");
      if (j.contains("chat_template")) tmpl = j["chat_template"];
    }
    if (tmpl.is_string()) kv.emplace_back("tokenizer.chat_template", gguf::Node::str(tmpl.get<std::string>()));
    else if (!tmpl.is_null()) fail("%s: chat_template lists named templates; only a single template is supported", cfile.c_str());
  }
  return kv;
}

}  // namespace

KeyValues build_vocab(const Checkpoint& ck, const VocabOptions& vo) {
  return json_checked(ck.dir + ": tokenizer.json, tokenizer_config.json or config.json",
                      [&] { return build_vocab_checked(ck, vo); });
}

}  // namespace tern::convert
