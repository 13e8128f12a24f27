// Text generation for one sequence: feed a prompt (only the tokens the sequence has not seen), then sample until
// n_predict tokens, an end-of-generation token, a stop string, or the callback asks to stop. Text is streamed
// as complete UTF-8 with stop-string prefixes held back. Shared by `tern run`, `tern chat` and the server.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "text/tokenizer.h"

namespace tern::runtime {

struct GenerateOptions {
  int n_predict = 256;               // < 0: until end of generation or the context is full
  std::vector<std::string> stop;     // stop strings (not included in the output)
  bool ignore_eos = false;
};

enum class StopReason { kLength, kEos, kStopString, kCancelled, kContextFull };
const char* stop_reason_name(StopReason r);

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (including a final end-of-generation token if one was sampled)
  std::string text;             // generated text as emitted (stop string and end token excluded)
  StopReason reason = StopReason::kLength;
  int64_t n_prompt = 0;         // prompt tokens actually processed (after any cached prefix)
  double prompt_seconds = 0, gen_seconds = 0;
};

// End-of-generation ids of a tokenizer: eos, eot, eom (GLM's <|observation|>, which ends a turn of tool calls), and
// the ChatML/Qwen end tokens when present.
std::vector<int32_t> end_of_generation_ids(const text::Tokenizer& tok);

// on_text receives each safe piece of text; returning false cancels. The sequence keeps every token it has
// processed (prompt and generated), so a following turn only feeds new tokens: it ends holding the prompt and every
// generated token but the last (sampled, never fed), with drafting as without (a last token that was an accepted
// draft is rolled back).
GenerateResult generate(Engine& engine, models::SequenceState& seq, const text::Tokenizer& tok,
                        Sampler& sampler, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                        const std::function<bool(const std::string&)>& on_text);

}  // namespace tern::runtime
