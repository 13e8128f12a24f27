// Chat template rendering: builds the variables transformers' render_jinja_template passes, then renders; and the
// continued-conversation pieces (answer text, turn delta) cut from renders of prefixes of a conversation.
#include "text/chat_template.h"

#include "core/error.h"

namespace tern::text {

namespace {

using json = nlohmann::ordered_json;

// transformers _alias_reasoning_fields: the first non-null of reasoning_content / thinking / reasoning becomes
// {"thinking": r, **message, "reasoning_content": r} (so `thinking` keeps first place unless the message had it).
json alias_reasoning(const json& m) {
  static const char* kFields[] = {"reasoning_content", "thinking", "reasoning"};
  const json* r = nullptr;
  for (const char* k : kFields) {
    auto it = m.find(k);
    if (it != m.end() && !it->is_null()) {
      r = &*it;
      break;
    }
  }
  if (!r) return m;
  json out = json::object();
  out["thinking"] = *r;
  for (const auto& [k, v] : m.items()) out[k] = v;
  out["thinking"] = m.contains("thinking") ? m["thinking"] : *r;
  out["reasoning_content"] = *r;
  return out;
}

// Stands in for an answer in turn_delta's render: control bytes no real message carries, with no whitespace the
// template could trim.
const std::string kAnswerMark = "\x01tern-answer-end\x01";

json first_n(const json& messages, size_t n) {
  json out = json::array();
  for (size_t i = 0; i < n && i < messages.size(); ++i) out.push_back(messages[i]);
  return out;
}

std::string role_of(const json& m) {
  if (!m.is_object()) return "";
  auto it = m.find("role");
  return it != m.end() && it->is_string() ? it->get<std::string>() : "";
}

bool is_answer(const json& messages, size_t k) {
  return messages.is_array() && k < messages.size() && role_of(messages[k]) == "assistant";
}

bool starts_with(const std::string& s, const std::string& p) { return s.size() >= p.size() && s.compare(0, p.size(), p) == 0; }

}  // namespace

ChatTemplate::ChatTemplate(const std::string& template_src) : src_(template_src), tpl_(template_src) {}

std::string ChatTemplate::render(const json& messages, const json& tools, bool add_generation_prompt,
                                 const json& extra_context) const {
  if (!messages.is_array()) fail("chat template: messages must be a JSON array, got %s", messages.type_name());
  if (!tools.is_null() && !tools.is_array()) fail("chat template: tools must be a JSON array or null, got %s", tools.type_name());
  if (!extra_context.is_null() && !extra_context.is_object())
    fail("chat template: extra context must be a JSON object or null, got %s", extra_context.type_name());
  json msgs = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object()) fail("chat template: messages[%zu] must be an object, got %s", i, messages[i].type_name());
    msgs.push_back(alias_reasoning(messages[i]));
  }
  json ctx = json::object();
  ctx["messages"] = std::move(msgs);
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  if (extra_context.is_object())
    for (const auto& [k, v] : extra_context.items()) ctx[k] = v;
  return tpl_.render(ctx);
}

std::optional<std::string> ChatTemplate::answer_text(const json& messages, size_t k, const json& tools,
                                                     const json& extra_context) const {
  if (!is_answer(messages, k)) return std::nullopt;
  try {
    const std::string prompt = render(first_n(messages, k), tools, true, extra_context);
    const std::string whole = render(first_n(messages, k + 1), tools, false, extra_context);
    json marked = first_n(messages, k);
    marked.push_back({{"role", "assistant"}, {"content", kAnswerMark}});
    const std::string m = render(marked, tools, false, extra_context);
    const size_t p = m.find(kAnswerMark);
    if (p == std::string::npos || m.find(kAnswerMark, p + 1) != std::string::npos) return std::nullopt;
    const std::string turn_end = m.substr(p + kAnswerMark.size());
    if (!starts_with(whole, prompt) || whole.size() < prompt.size() + turn_end.size() ||
        whole.compare(whole.size() - turn_end.size(), turn_end.size(), turn_end) != 0)
      return std::nullopt;
    return whole.substr(prompt.size(), whole.size() - prompt.size() - turn_end.size());
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::optional<std::string> ChatTemplate::turn_delta(const json& messages, size_t k, const json& tools,
                                                    const json& extra_context) const {
  if (!is_answer(messages, k)) return std::nullopt;
  try {
    json marked = messages;
    marked[k] = {{"role", "assistant"}, {"content", kAnswerMark}};
    const std::string m = render(marked, tools, true, extra_context);
    const size_t p = m.find(kAnswerMark);
    if (p == std::string::npos || m.find(kAnswerMark, p + 1) != std::string::npos) return std::nullopt;
    return m.substr(p + kAnswerMark.size());
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::vector<std::string> ChatTemplate::render_turns(const json& messages, const json& tools, const json& extra_context,
                                                    TurnCache* cache) const {
  // Turn boundaries: assistant messages followed by another role.
  std::vector<size_t> answers;
  for (size_t k = 0; messages.is_array() && k + 1 < messages.size(); ++k)
    if (role_of(messages[k]) == "assistant" && role_of(messages[k + 1]) != "assistant") answers.push_back(k);
  // The cache key of messages[0..n): their JSON, then the tools and the extra context.
  auto key_of = [&](size_t n) {
    std::string key;
    for (size_t i = 0; i < n; ++i) key += messages[i].dump() + '\n';
    return key + '\0' + tools.dump() + '\0' + extra_context.dump();
  };
  if (answers.empty()) {  // the first turn (kept too: the next turn starts from it)
    std::vector<std::string> pieces{render(messages, tools, true, extra_context)};
    if (cache) cache->put(key_of(messages.size()), pieces);
    return pieces;
  }
  // Before step i, pieces = render_turns(messages[0..answers[i])): the prompt of the turn answered by
  // answers[i]. Empty: that prefix does not render (a request for that turn would have been refused, so nothing
  // was fed that must be matched).
  std::vector<std::string> pieces;
  size_t i = 0;
  std::optional<std::vector<std::string>> hit;
  if (cache) hit = cache->find(key_of(answers.back()));
  if (hit) {
    pieces = std::move(*hit);
    i = answers.size() - 1;
  } else {
    try {
      pieces.push_back(render(first_n(messages, answers[0]), tools, true, extra_context));
    } catch (const Error&) {
    }
  }
  for (; i < answers.size(); ++i) {
    const bool last = i + 1 == answers.size();
    const json upto = last ? messages : first_n(messages, answers[i + 1]);
    std::optional<std::string> answer, delta;
    if (!pieces.empty()) answer = answer_text(messages, answers[i], tools, extra_context);
    if (answer) delta = turn_delta(upto, answers[i], tools, extra_context);
    if (answer && delta) {
      pieces.push_back(std::move(*answer));
      pieces.push_back(std::move(*delta));
      continue;
    }
    pieces.clear();
    if (last) {
      pieces.push_back(render(messages, tools, true, extra_context));  // errors reach the caller
      break;
    }
    try {
      pieces.push_back(render(upto, tools, true, extra_context));
    } catch (const Error&) {
    }
  }
  if (cache) cache->put(key_of(messages.size()), pieces);
  return pieces;
}

std::optional<std::vector<std::string>> TurnCache::find(const std::string& key) {
  std::lock_guard lk(m_);
  for (auto it = lru_.begin(); it != lru_.end(); ++it)
    if (it->first == key) {
      lru_.splice(lru_.begin(), lru_, it);
      ++hits_;
      return it->second;
    }
  return std::nullopt;
}

void TurnCache::put(std::string key, std::vector<std::string> pieces) {
  if (max_ == 0) return;
  std::lock_guard lk(m_);
  for (auto it = lru_.begin(); it != lru_.end(); ++it)
    if (it->first == key) {
      lru_.erase(it);
      break;
    }
  lru_.emplace_front(std::move(key), std::move(pieces));
  while (lru_.size() > max_) lru_.pop_back();
}

int64_t TurnCache::hits() const {
  std::lock_guard lk(m_);
  return hits_;
}

std::vector<int32_t> encode_turns(const Tokenizer& tok, const std::vector<std::string>& pieces) {
  std::vector<int32_t> ids;
  if (tok.add_bos() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  for (const std::string& p : pieces) {
    const std::vector<int32_t> enc = tok.encode(p, /*parse_special=*/true);
    ids.insert(ids.end(), enc.begin(), enc.end());
  }
  return ids;
}

std::string render_chat(const std::string& template_src, const json& messages, const json& tools,
                        bool add_generation_prompt, const json& extra_context) {
  return ChatTemplate(template_src).render(messages, tools, add_generation_prompt, extra_context);
}

}  // namespace tern::text
