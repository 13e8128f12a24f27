// libFuzzer target: the byte-level BPE tokenizer of the bundled model (Qwen3.5 vocabulary, qwen35 pre-tokenizer,
// NFC) and of the GLM-5 toy fixture (glm4 pre-tokenizer), both read from committed GGUFs once. Checks: invalid
// UTF-8 is a tern::Error; valid text round-trips (decode(encode(t)) == t, up to NFC where the tokenizer applies
// it); the stream decoder gives the same bytes token by token; any id list decodes or fails with tern::Error and
// streams as valid UTF-8. Byte 0 picks tokenizer and parse_special.
#include <utf8proc.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "text/gguf_vocab.h"
#include "text/tokenizer.h"

namespace {

using tern::text::Tokenizer;

Tokenizer load(const char* rel) {
  const tern::gguf::File f = tern::gguf::File::open(std::string(TERN_SOURCE_DIR) + "/" + rel);
  return Tokenizer(tern::text::tokenizer_data_from_gguf(f));
}

std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          utf8proc_ssize_t(s.size()), &out,
                                          utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) __builtin_trap();  // s is valid UTF-8 here
  std::string r(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return r;
}

std::string stream(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  tern::text::StreamDecoder dec(tok);
  std::string s;
  for (int32_t id : ids) s += dec.push(id);
  return s + dec.flush();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer qwen = load("models/tern-tiny-q35moe.gguf");
  static const Tokenizer glm = load("tests/fixtures/models/glm5-toy.f16.gguf");
  if (size < 1) return 0;
  const Tokenizer& tok = data[0] & 1 ? glm : qwen;
  const bool parse_special = data[0] & 2;
  const bool normalises = &tok == &qwen;  // qwen35: NFC (apply_gguf_pre_defaults); glm4: none
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  if (!tern::text::utf8_valid(text)) {
    try {
      tok.encode(text, parse_special);
    } catch (const tern::Error&) {
      // expected
    }
  } else {
    const std::vector<int32_t> ids = tok.encode(text, parse_special);  // valid text: any Error is a finding
    const std::string back = tok.decode(ids);
    if (normalises ? nfc(back) != nfc(text) : back != text) __builtin_trap();
    if (stream(tok, ids) != back) __builtin_trap();
  }

  // The same bytes as token ids (2 bytes each; a few past the vocabulary, which must be a tern::Error).
  std::vector<int32_t> ids;
  for (size_t i = 1; i + 1 < size; i += 2) ids.push_back(int32_t((data[i] | data[i + 1] << 8) % (tok.n_vocab() + 4)));
  bool ok = true;
  try {
    tok.decode(ids, data[0] & 4);
  } catch (const tern::Error&) {
    ok = false;
  }
  if (ok && !tern::text::utf8_valid(stream(tok, ids))) __builtin_trap();
  return 0;
}
