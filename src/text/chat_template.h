// Chat prompt rendering with a model's own Jinja chat template (GGUF `tokenizer.chat_template`), byte-identical
// to transformers' apply_chat_template(tokenize=False). No built-in fallback: a model without a template is the
// caller's error to report. Also: multi-turn prompts that extend what the model saw in earlier turns (render_turns).
#pragma once
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/jinja.h"
#include "text/tokenizer.h"

namespace tern::text {

// A parsed chat template, reusable across requests.
// Remembers render_turns results of recent conversations (least recently used out), so that a follow-up turn renders
// only its newest turn: without it every request re-renders every earlier turn (about 4 renders per turn, quadratic
// in the number of turns: ~1.5 s for 100 turns of 1 KB). A result is a function of its key (the messages, tools and
// extra context), so a hit gives exactly what rendering would. Thread-safe.
class TurnCache {
 public:
  explicit TurnCache(size_t max_entries = 64) : max_(max_entries) {}
  std::optional<std::vector<std::string>> find(const std::string& key);
  void put(std::string key, std::vector<std::string> pieces);
  int64_t hits() const;

 private:
  mutable std::mutex m_;
  size_t max_;
  int64_t hits_ = 0;
  std::list<std::pair<std::string, std::vector<std::string>>> lru_;  // front: most recent
};

class ChatTemplate {
 public:
  // Throws tern::Error (with line/column) when the template is malformed or uses unsupported constructs.
  explicit ChatTemplate(const std::string& template_src);

  // messages: array of message objects; tools: array of tool schemas or null; extra_context: object of further
  // template variables (enable_thinking, bos_token, ...) or null. Variables are passed like transformers does:
  // messages, tools (None when null), documents (None), add_generation_prompt, then extra_context. Message
  // reasoning given as `thinking` / `reasoning` is aliased to `reasoning_content` (transformers >= 5).
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt, const nlohmann::ordered_json& extra_context) const;

  // Continued conversations. Re-rendering a conversation does not extend the text the model read while answering
  // its last turn: templates rewrite earlier answers (Qwen3.5 drops their <think> blocks), and a recurrent state
  // cannot be rolled back to match. A continued conversation is instead the prompt of turn k, answer k as it
  // followed that prompt, and the turn delta up to the generation prompt of turn k+1; and so on for every turn.
  // Functions below take `k`, the index of an assistant message; a render error in them means "not found".

  // Assistant message k as the text that followed the generation prompt of its turn: the template's render of
  // messages[0..k] where message k is the newest, minus the render of messages[0..k) with the generation prompt
  // (a prefix of it) and minus the turn end. For an answer the model generated and the client sent back unchanged
  // this is the generated text. nullopt when the template does not render message k after that generation prompt.
  std::optional<std::string> answer_text(const nlohmann::ordered_json& messages, size_t k,
                                         const nlohmann::ordered_json& tools,
                                         const nlohmann::ordered_json& extra_context) const;
  // The text from the end of assistant message k to the end of the render of all `messages` with the generation
  // prompt: the end of turn k, the messages after it, the next generation prompt. Cut from a render with a marker
  // in place of message k; nullopt when the template does not show that marker exactly once.
  std::optional<std::string> turn_delta(const nlohmann::ordered_json& messages, size_t k,
                                        const nlohmann::ordered_json& tools,
                                        const nlohmann::ordered_json& extra_context) const;
  // The generation prompt of `messages` as a continued conversation, in pieces to tokenize one at a time (so the
  // tokens of earlier turns are the ones fed then): the plain render up to the first assistant message that is
  // followed by another role, then for each such message its answer_text and its turn_delta up to the next one.
  // Where a piece is not found, the pieces so far give way to the plain render up to the next such message.
  // Without earlier answers this is one piece, render(messages, tools, true, extra_context). Throws what render
  // throws for the whole conversation. cache (optional): earlier results to start from, and where this one goes.
  std::vector<std::string> render_turns(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                        const nlohmann::ordered_json& extra_context, TurnCache* cache = nullptr) const;

  // The template as given (callers read the model's output dialect from it: tool-call and think tags).
  const std::string& source() const { return src_; }

 private:
  std::string src_;
  jinja::Template tpl_;
};

// One-shot convenience: parse + render.
std::string render_chat(const std::string& template_src, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                        const nlohmann::ordered_json& extra_context);

// render_turns' pieces as token ids: each piece encoded on its own with special tokens parsed, BOS first when the
// tokenizer adds one. Throws tern::Error on invalid UTF-8.
std::vector<int32_t> encode_turns(const Tokenizer& tok, const std::vector<std::string>& pieces);

}  // namespace tern::text
