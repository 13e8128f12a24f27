// libFuzzer target: what the server does with a request body before scheduling it (serve/api.h), without HTTP:
// parse_json_body, then parse_chat_request (messages, tools, tool_choice, response_format json_object/json_schema,
// chat template render, tokenization) or parse_completion_request, with the bundled model's tokenizer and chat
// template (Qwen dialect) or the GLM-5 toy fixture's (GLM dialect). Then, as the scheduler would, a few steps of
// the request's token constraint (JSON / forced tool choice) over the vocabulary. Any outcome but a ParsedRequest
// or an ApiError / tern::Error (the route's 4xx) is a bug: the route answers anything else with a 500. Byte 0 picks
// the endpoint (bit 0: completions, else chat; bit 4: Anthropic's /v1/messages, translated by messages_to_chat,
// bit 5 with it: /v1/messages/count_tokens), the model (bit 1: GLM), reasoning_format (bit 2) and the turn cache
// (bit 3); the rest is the body.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "serve/anthropic.h"
#include "serve/api.h"
#include "serve/json_constraint.h"
#include "text/gguf_vocab.h"

namespace {

using namespace tern;
using namespace tern::serve;

struct Model {
  text::Tokenizer tok;
  text::ChatTemplate tpl;
  ModelInfo info;
  ToolCallFormat format;
  std::vector<std::string> bytes;  // [n_vocab] token bytes
  std::vector<bool> special;       // [n_vocab] control tokens

  Model(const gguf::File& f, ToolCallFormat fmt)
      : tok(text::tokenizer_data_from_gguf(f)), tpl(*text::chat_template_from_gguf(f)), format(fmt) {
    info.id = "fuzz";
    info.n_ctx = 4096;
    info.n_ctx_train = 4096;
    info.n_vocab = tok.n_vocab();
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
      bytes.push_back(tok.token_bytes(id));
      special.push_back(tok.token_type(id) == text::TokenType::kControl);
    }
  }
};

std::unique_ptr<Model> load(const char* rel, ToolCallFormat fmt) {
  const gguf::File f = gguf::File::open(std::string(TERN_SOURCE_DIR) + "/" + rel);
  return std::make_unique<Model>(f, fmt);
}

// Greedy walk: the first allowed token each step, as a sampler with flat logits would pick.
void walk(TokenConstraint& c, int64_t n_vocab, int steps) {
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  for (int s = 0; s < steps && !c.done(); ++s) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    if (!c.mask(logits.data(), n_vocab)) return;
    int32_t pick = -1;
    for (int64_t i = 0; i < n_vocab && pick < 0; ++i)
      if (logits[size_t(i)] != -std::numeric_limits<float>::infinity()) pick = int32_t(i);
    if (pick < 0) __builtin_trap();  // mask said some token may come next
    c.accept(pick);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<Model> qwen = load("models/tern-tiny-q35moe.gguf", ToolCallFormat::kQwen);
  static const std::unique_ptr<Model> glm = load("tests/fixtures/models/glm5-toy.f16.gguf", ToolCallFormat::kGlm);
  if (size < 1) return 0;
  const Model& m = data[0] & 2 ? *glm : *qwen;
  const bool messages = data[0] & 16;
  const bool chat = messages || !(data[0] & 1);
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  text::TurnCache turns;
  ApiContext ctx{m.tok, &m.tpl, m.info, data[0] & 4 ? "auto" : "none", data[0] & 8 ? &turns : nullptr, m.format};
  try {
    const json b = messages ? messages_to_chat(parse_json_body(body), data[0] & 32) : parse_json_body(body);
    ParsedRequest p = chat ? parse_chat_request(b, ctx) : parse_completion_request(b, ctx);
    if (p.gen.prompt.empty()) __builtin_trap();
    for (int32_t id : p.gen.prompt)
      if (id < 0 || id >= m.tok.n_vocab()) __builtin_trap();
    if (p.gen.json_object) {
      if (!p.gen.json_schema.is_null() && !check_schema(p.gen.json_schema).empty()) __builtin_trap();
      JsonConstraint c(m.bytes, m.special, p.gen.json_schema);
      walk(c, m.tok.n_vocab(), 6);
    } else if (!p.gen.choice.empty()) {
      ChoiceConstraint c(m.bytes, m.special, p.gen.choice);
      walk(c, m.tok.n_vocab(), 6);
    }
    // A follow-up with the same body gives the same prompt (the turn cache only saves work).
    if (chat && (data[0] & 8) && parse_chat_request(b, ctx).gen.prompt != p.gen.prompt) __builtin_trap();
  } catch (const ApiError&) {  // the route's 4xx
  } catch (const Error&) {     // the route answers 400 too (bad input found deeper)
  }
  return 0;
}
