// libFuzzer target: the safetensors header parser on arbitrary bytes, then a read of every tensor's first and
// last byte. Any outcome but success or tern::Error is a bug (ASan/UBSan on).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A heap copy of exactly `size` bytes, so any read past the end is caught.
  std::unique_ptr<uint8_t[]> buf(new uint8_t[size ? size : 1]);
  if (size) std::memcpy(buf.get(), data, size);
  try {
    const auto f = tern::safetensors::File::parse("fuzz.safetensors", buf.get(), size);
    size_t sink = 0;
    for (const auto& t : f.tensors()) {
      sink += t.n_bytes() ? t.data[0] + t.data[t.n_bytes() - 1] : 0;
      sink += t.shape_str().size() + (f.find(t.name) == &t);
    }
    for (const auto& [k, v] : f.metadata()) sink += k.size() + v.size();
    volatile size_t keep = sink;
    (void)keep;
  } catch (const tern::Error&) {
  }
  return 0;
}
