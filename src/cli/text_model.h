// What the text commands load with a model: the engine, the tokenizer and the chat template from the same GGUF.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "runtime/engine.h"
#include "text/gguf_vocab.h"
#include "text/tokenizer.h"

namespace tern::cli {

struct TextModel {
  std::unique_ptr<runtime::Engine> engine;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::optional<std::string> chat_template;

  explicit TextModel(const runtime::EngineOptions& o)
      : engine(std::make_unique<runtime::Engine>(o)),
        tokenizer(std::make_unique<text::Tokenizer>(text::tokenizer_data_from_gguf(engine->model().file()))),
        chat_template(text::chat_template_from_gguf(engine->model().file())) {}
};

}  // namespace tern::cli
