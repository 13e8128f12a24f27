// libFuzzer target: the GGUF parser on arbitrary bytes, then everything `tern info` does with a parsed file
// (typed getters, model summary, JSON). Any outcome but success or tern::Error is a bug (ASan/UBSan on).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/model_summary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A heap copy of exactly `size` bytes, so any read past the end is caught.
  std::unique_ptr<uint8_t[]> buf(new uint8_t[size ? size : 1]);
  if (size) std::memcpy(buf.get(), data, size);
  try {
    const tern::gguf::File f = tern::gguf::File::parse("fuzz.gguf", buf.get(), size);
    size_t sink = 0;
    for (const auto& v : f.metadata()) {
      sink += v.describe().size();
      if (v.is_array() && v.array_size() > 0) {
        try {
          sink += static_cast<size_t>(v.array_i64(0));
        } catch (const tern::Error&) {
        }
      }
    }
    for (const auto& t : f.tensors()) sink += t.n_bytes ? t.data[t.n_bytes - 1] + t.data[0] : 0;
    try {
      const auto s = tern::gguf::summarize(f);
      sink += tern::gguf::to_json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
    } catch (const tern::Error&) {
    }
    if (sink == 1) std::memset(buf.get(), 0, 1);  // keep `sink` observable
  } catch (const tern::Error&) {
  }
  return 0;
}
