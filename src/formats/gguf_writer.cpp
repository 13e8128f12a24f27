// GGUF writer (layout in gguf.cpp). Tensor offsets are assigned in insertion order, each padded to the alignment.
#include "formats/gguf_writer.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "core/error.h"
#include "formats/gguf_util.h"

namespace tern::gguf {

namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_str(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

template <typename T>
constexpr ValueType type_of() {
  if constexpr (std::is_same_v<T, uint8_t>) return ValueType::U8;
  else if constexpr (std::is_same_v<T, int8_t>) return ValueType::I8;
  else if constexpr (std::is_same_v<T, uint16_t>) return ValueType::U16;
  else if constexpr (std::is_same_v<T, int16_t>) return ValueType::I16;
  else if constexpr (std::is_same_v<T, uint32_t>) return ValueType::U32;
  else if constexpr (std::is_same_v<T, int32_t>) return ValueType::I32;
  else if constexpr (std::is_same_v<T, float>) return ValueType::F32;
  else if constexpr (std::is_same_v<T, uint64_t>) return ValueType::U64;
  else if constexpr (std::is_same_v<T, int64_t>) return ValueType::I64;
  else if constexpr (std::is_same_v<T, double>) return ValueType::F64;
  else static_assert(sizeof(T) == 0, "not a GGUF scalar type");
}

}  // namespace

#define TERN_GGUF_SCALAR(fn, T, VT)  \
  Node Node::fn(T v) {               \
    Node n(ValueType::VT);           \
    put<T>(n.payload_, v);           \
    return n;                        \
  }
TERN_GGUF_SCALAR(u8, uint8_t, U8)
TERN_GGUF_SCALAR(i8, int8_t, I8)
TERN_GGUF_SCALAR(u16, uint16_t, U16)
TERN_GGUF_SCALAR(i16, int16_t, I16)
TERN_GGUF_SCALAR(u32, uint32_t, U32)
TERN_GGUF_SCALAR(i32, int32_t, I32)
TERN_GGUF_SCALAR(f32, float, F32)
TERN_GGUF_SCALAR(u64, uint64_t, U64)
TERN_GGUF_SCALAR(i64, int64_t, I64)
TERN_GGUF_SCALAR(f64, double, F64)
#undef TERN_GGUF_SCALAR

Node Node::boolean(bool v) {
  Node n(ValueType::Bool);
  put<uint8_t>(n.payload_, v ? 1 : 0);
  return n;
}

Node Node::str(std::string_view v) {
  if (v.size() > kMaxStringLength) fail("gguf writer: string of %zu bytes exceeds the GGUF limit", v.size());
  Node n(ValueType::String);
  put_str(n.payload_, v);
  return n;
}

Node Node::array(ValueType elem, const std::vector<Node>& items) {
  Node n(ValueType::Array);
  put<uint32_t>(n.payload_, static_cast<uint32_t>(elem));
  put<uint64_t>(n.payload_, items.size());
  for (const Node& it : items) {
    if (it.type_ != elem)
      fail("gguf writer: array of %s given a %s item", value_type_name(elem), value_type_name(it.type_));
    n.payload_.insert(n.payload_.end(), it.payload_.begin(), it.payload_.end());
  }
  return n;
}

template <typename T>
Node Node::array_of(std::span<const T> v) {
  Node n(ValueType::Array);
  put<uint32_t>(n.payload_, static_cast<uint32_t>(type_of<T>()));
  put<uint64_t>(n.payload_, v.size());
  for (const T& x : v) put<T>(n.payload_, x);
  return n;
}
template Node Node::array_of<uint8_t>(std::span<const uint8_t>);
template Node Node::array_of<int8_t>(std::span<const int8_t>);
template Node Node::array_of<uint16_t>(std::span<const uint16_t>);
template Node Node::array_of<int16_t>(std::span<const int16_t>);
template Node Node::array_of<uint32_t>(std::span<const uint32_t>);
template Node Node::array_of<int32_t>(std::span<const int32_t>);
template Node Node::array_of<float>(std::span<const float>);
template Node Node::array_of<uint64_t>(std::span<const uint64_t>);
template Node Node::array_of<int64_t>(std::span<const int64_t>);
template Node Node::array_of<double>(std::span<const double>);

Node Node::array_of_bool(const std::vector<bool>& v) {
  Node n(ValueType::Array);
  put<uint32_t>(n.payload_, static_cast<uint32_t>(ValueType::Bool));
  put<uint64_t>(n.payload_, v.size());
  for (bool b : v) put<uint8_t>(n.payload_, b ? 1 : 0);
  return n;
}

Node Node::array_of_str(std::span<const std::string> v) {
  Node n(ValueType::Array);
  put<uint32_t>(n.payload_, static_cast<uint32_t>(ValueType::String));
  put<uint64_t>(n.payload_, v.size());
  for (const std::string& s : v) {
    if (s.size() > kMaxStringLength) fail("gguf writer: string of %zu bytes exceeds the GGUF limit", s.size());
    put_str(n.payload_, s);
  }
  return n;
}

Writer::Writer(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    fail("gguf writer: alignment %u is not a nonzero power of two", alignment);
  if (alignment != kDefaultAlignment) add_u32(kAlignmentKey, alignment);
}

void Writer::add(const std::string& key, const Node& value) {
  if (key.empty()) fail("gguf writer: empty metadata key");
  if (key.size() > kMaxKeyLength) fail("gguf writer: key '%s...' is longer than %" PRIu64, key.substr(0, 40).c_str(), kMaxKeyLength);
  if (!keys_.insert(key).second) fail("gguf writer: duplicate key '%s'", key.c_str());
  put_str(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(value.type()));
  kv_bytes_.insert(kv_bytes_.end(), value.payload().begin(), value.payload().end());
  ++n_kv_;
}

void Writer::add_tensor_view(const std::string& name, quant::Type type, std::vector<int64_t> ne,
                             std::span<const uint8_t> bytes) {
  if (name.empty() || name.size() > kMaxTensorNameLength)
    fail("gguf writer: tensor name '%s' must be 1..%zu bytes", name.c_str(), kMaxTensorNameLength);
  if (ne.empty() || ne.size() > kMaxDims) fail("gguf writer: tensor '%s': %zu dims, expected 1..4", name.c_str(), ne.size());
  const quant::TypeTraits& tr = quant::traits(type);
  int64_t n = 1;
  for (int64_t d : ne)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) fail("gguf writer: tensor '%s': bad shape", name.c_str());
  if (ne[0] % tr.block_size != 0)
    fail("gguf writer: tensor '%s': row length %" PRId64 " is not a multiple of the %s block size %" PRId64,
         name.c_str(), ne[0], tr.name, tr.block_size);
  const uint64_t expect = static_cast<uint64_t>(n / tr.block_size) * tr.type_size;
  if (bytes.size() != expect)
    fail("gguf writer: tensor '%s': %zu bytes given, %s of this shape is %" PRIu64 " bytes", name.c_str(),
         bytes.size(), tr.name, expect);
  if (!tensor_names_.insert(name).second) fail("gguf writer: duplicate tensor name '%s'", name.c_str());
  tensors_.push_back({name, type, std::move(ne), {}, bytes, data_size_});
  data_size_ += (expect + alignment_ - 1) / alignment_ * alignment_;
}

void Writer::add_tensor(const std::string& name, quant::Type type, std::vector<int64_t> ne,
                        std::span<const uint8_t> bytes) {
  add_tensor_view(name, type, std::move(ne), bytes);
  Tensor& t = tensors_.back();
  t.owned.assign(bytes.begin(), bytes.end());
  t.bytes = t.owned;  // the vector's buffer stays put when tensors_ grows (vector moves keep their storage)
}

// Calls sink(ptr, n) with the file's bytes in order.
template <typename Sink>
void Writer::emit(Sink&& sink) const {
  std::vector<uint8_t> head;
  put<uint32_t>(head, kMagic);
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, n_kv_);
  head.insert(head.end(), kv_bytes_.begin(), kv_bytes_.end());
  for (const Tensor& t : tensors_) {
    put_str(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<int64_t>(head, d);
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, t.offset);
  }
  head.resize((head.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  sink(head.data(), head.size());
  static const uint8_t kZeros[64] = {};
  for (const Tensor& t : tensors_) {
    sink(t.bytes.data(), t.bytes.size());
    for (size_t pad = (alignment_ - t.bytes.size() % alignment_) % alignment_; pad > 0;) {
      const size_t k = pad < sizeof(kZeros) ? pad : sizeof(kZeros);
      sink(kZeros, k);
      pad -= k;
    }
  }
}

std::vector<uint8_t> Writer::serialize() const {
  std::vector<uint8_t> out;
  emit([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

void Writer::write(const std::string& path) const {
  const std::string tmp = path + strf(".tmp.%d", static_cast<int>(::getpid()));
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("%s: cannot create: %s", tmp.c_str(), std::strerror(errno));
  bool ok = true;
  int err = 0;
  emit([&](const void* p, size_t n) {
    if (ok && n > 0 && std::fwrite(p, 1, n, f) != n) {
      ok = false;
      err = errno;
    }
  });
  if (ok && std::fflush(f) != 0) ok = false, err = errno;
  if (ok && ::fsync(::fileno(f)) != 0) ok = false, err = errno;
  if (std::fclose(f) != 0 && ok) ok = false, err = errno;
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) ok = false, err = errno;
  if (!ok) {
    std::remove(tmp.c_str());
    fail("%s: cannot write: %s", path.c_str(), std::strerror(err));
  }
}

}  // namespace tern::gguf
