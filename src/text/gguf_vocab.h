// Tokenizer data and chat template from GGUF metadata (tokenizer.ggml.*, tokenizer.chat_template), as llama.cpp's
// converter writes them. Only byte-level BPE (tokenizer.ggml.model = "gpt2") is supported.
#pragma once
#include <optional>
#include <string>

#include "text/tokenizer.h"

namespace tern::gguf {
class File;
}

namespace tern::text {

TokenizerData tokenizer_data_from_gguf(const gguf::File& f);  // throws Error naming the file and key
std::optional<std::string> chat_template_from_gguf(const gguf::File& f);

}  // namespace tern::text
