// GGUF parser. Layout (little-endian; gguf spec, ggml/docs/gguf.md):
//   magic u32 "GGUF" | version u32 | n_tensors u64 | n_kv u64
//   n_kv x { key: str, type: u32, value }            str = { len u64, bytes }, arr = { type u32, n u64, n x value }
//   n_tensors x { name: str, n_dims u32, ne[n_dims] i64, type u32, offset u64 }
//   padding to `alignment` | data section (each tensor at data_offset + offset, offset a multiple of alignment)
// Every read goes through Parser::need(), which checks the remaining bytes first.
#include "formats/gguf.h"

#include <algorithm>
#include <cinttypes>

#include "core/error.h"
#include "formats/gguf_util.h"

namespace tern::gguf {

namespace {

// Smallest encodings, used to reject absurd counts before looping over them.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;          // key len, 1-byte key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 4 + 8;  // name len, 1-byte name, n_dims, type, offset
constexpr uint64_t kMinNestedArrayBytes = 4 + 8;          // element type + count of an inner array

}  // namespace

class Parser {
 public:
  Parser(File& f) : f_(f), p_(f.base_), size_(f.size_) {}

  void run() {
    read_header();
    for (uint64_t i = 0; i < n_kv_; ++i) read_kv(i);
    f_.index();  // rejects duplicate keys before any key is looked up
    read_alignment();
    if (n_tensors_ < (1u << 16)) f_.tensors_.reserve(n_tensors_);  // n_tensors_ is bounded by the file size
    for (uint64_t i = 0; i < n_tensors_; ++i) read_tensor_info(i);
    place_data();
    f_.index();  // rejects duplicate tensor names
    check_overlaps();
  }

 private:
  const char* fname() const { return f_.name_.c_str(); }

  // Where the cursor is, for messages: "key 'k'[3][0]" or "tensor 'w'". Built only when an error is reported.
  std::string where() const {
    std::string w;
    switch (ctx_kind_) {
      case Ctx::kHeader: break;
      case Ctx::kEntry: w = strf("metadata entry %" PRIu64, ctx_i_); break;
      case Ctx::kKey: w = "key '" + printable(ctx_name_) + "'"; break;
      case Ctx::kTensorIndex: w = strf("tensor %" PRIu64, ctx_i_); break;
      case Ctx::kTensor: w = "tensor '" + printable(ctx_name_) + "'"; break;
    }
    for (uint64_t i : index_) w += strf("[%" PRIu64 "]", i);
    return w;
  }
  std::string where(const char* what) const {
    std::string w = where();
    return w.empty() ? what : w + " " + what;
  }

  // Throws unless n more bytes are available at the cursor.
  void need(uint64_t n, const char* what) {
    if (n > size_ - pos_)
      fail("%s: truncated: %s needs %" PRIu64 " bytes at offset %" PRIu64 ", file has %" PRIu64 " bytes", fname(),
           where(what).c_str(), n, pos_, size_);
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v = load_le<T>(p_ + pos_);
    pos_ += sizeof(T);
    return v;
  }

  std::string_view read_str(const char* what, uint64_t max_len) {
    const uint64_t len = read<uint64_t>(what);
    if (len > max_len)
      fail("%s: %s: length %" PRIu64 " exceeds the limit of %" PRIu64 " bytes", fname(), where(what).c_str(), len,
           max_len);
    need(len, what);
    std::string_view s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }

  void read_header() {
    const uint32_t magic = read<uint32_t>("magic");
    if (magic != kMagic)
      fail("%s: not a GGUF file (magic %s, expected \"GGUF\")", fname(),
           printable(std::string_view(reinterpret_cast<const char*>(p_), 4)).c_str());
    const uint32_t v = read<uint32_t>("version");
    if (v != 0 && (v & 0xffff) == 0)
      fail("%s: GGUF version 0x%08x looks byte-swapped: big-endian GGUF files are not supported", fname(), v);
    if (v == 1) fail("%s: GGUF version 1 is not supported (expected version 2 or 3; re-convert the model)", fname());
    if (v < kMinVersion || v > kMaxVersion)
      fail("%s: unsupported GGUF version %u (expected %u or %u)", fname(), v, kMinVersion, kMaxVersion);
    f_.version_ = v;
    n_tensors_ = read<uint64_t>("tensor count");
    n_kv_ = read<uint64_t>("metadata count");
    const uint64_t left = size_ - pos_;
    if (n_kv_ > left / kMinKvBytes)
      fail("%s: header claims %" PRIu64 " metadata entries, but only %" PRIu64
           " bytes follow (each entry needs at least %" PRIu64 ")", fname(), n_kv_, left, kMinKvBytes);
    if (n_tensors_ > left / kMinTensorInfoBytes)
      fail("%s: header claims %" PRIu64 " tensors, but only %" PRIu64 " bytes follow (each needs at least %" PRIu64
           ")", fname(), n_tensors_, left, kMinTensorInfoBytes);
  }

  ValueType read_type(const char* what) {
    const uint32_t t = read<uint32_t>(what);
    if (t > static_cast<uint32_t>(ValueType::F64))
      fail("%s: %s: unknown value type id %u (expected 0..12)", fname(), where(what).c_str(), t);
    return static_cast<ValueType>(t);
  }

  void read_kv(uint64_t i) {
    set_ctx(Ctx::kEntry, i);
    const std::string_view key = read_str("key", kMaxKeyLength);
    if (key.empty()) fail("%s: metadata entry %" PRIu64 " has an empty key", fname(), i);
    set_ctx(Ctx::kKey, i, key);
    const ValueType t = read_type("type");
    f_.kv_.emplace_back(key, read_value(t, key, 0));
  }

  Value::Data read_value(ValueType t, std::string_view key, int depth) {
    switch (t) {
      case ValueType::U8: return read<uint8_t>("value");
      case ValueType::I8: return read<int8_t>("value");
      case ValueType::U16: return read<uint16_t>("value");
      case ValueType::I16: return read<int16_t>("value");
      case ValueType::U32: return read<uint32_t>("value");
      case ValueType::I32: return read<int32_t>("value");
      case ValueType::F32: return read<float>("value");
      case ValueType::Bool: return read<uint8_t>("value") != 0;  // as ggml: any nonzero byte is true
      case ValueType::String: return read_str("value", kMaxStringLength);
      case ValueType::Array: return read_array(key, depth + 1);
      case ValueType::U64: return read<uint64_t>("value");
      case ValueType::I64: return read<int64_t>("value");
      case ValueType::F64: return read<double>("value");
    }
    fail("internal: value type %u", static_cast<unsigned>(t));
  }

  Array read_array(std::string_view key, int depth) {
    if (depth > kMaxArrayDepth)
      fail("%s: %s: arrays nested deeper than %d levels", fname(), where().c_str(), kMaxArrayDepth);
    Array a;
    a.type = read_type("array element type");
    a.size = read<uint64_t>("array length");
    if (a.size > kMaxArrayLength)
      fail("%s: %s: array length %" PRIu64 " exceeds the limit of %" PRIu64, fname(), where().c_str(), a.size,
           kMaxArrayLength);
    const uint64_t left = size_ - pos_;
    const size_t elem = value_type_size(a.type);
    // Minimum bytes per element, checked against what is left before anything is sized by a.size.
    const uint64_t min_elem = elem ? elem : (a.type == ValueType::String ? 8 : kMinNestedArrayBytes);
    if (a.size > left / min_elem)
      fail("%s: truncated: %s: array of %" PRIu64 " %s needs at least %" PRIu64 " bytes at offset %" PRIu64
           ", file has %" PRIu64 " bytes", fname(), where().c_str(), a.size, value_type_name(a.type),
           a.size * min_elem, pos_, size_);
    if (elem) {
      a.raw = p_ + pos_;
      pos_ += a.size * elem;
      return a;
    }
    index_.push_back(0);
    if (a.type == ValueType::String) {
      a.strings.reserve(a.size);  // <= left / 8 views
      for (uint64_t j = 0; j < a.size; ++j, ++index_.back()) a.strings.push_back(read_str("string", kMaxStringLength));
    } else {
      // Each parsed inner array costs ~100 bytes of memory for >= 12 bytes of file: cap the total.
      if (a.size > kMaxNestedArrays - n_nested_)
        fail("%s: %s: more than %" PRIu64 " nested arrays in the file", fname(), where().c_str(), kMaxNestedArrays);
      n_nested_ += a.size;
      a.arrays.reserve(a.size);  // <= left / 12 values
      for (uint64_t j = 0; j < a.size; ++j, ++index_.back()) a.arrays.emplace_back(key, read_array(key, depth + 1));
    }
    index_.pop_back();
    return a;
  }

  void read_alignment() {
    const Value* v = f_.find(kAlignmentKey);
    if (!v) return;
    if (v->type() != ValueType::U32)
      fail("%s: key '%s': expected u32, found %s", fname(), kAlignmentKey, v->describe().c_str());
    const uint32_t a = v->as_u32();
    if (a == 0 || (a & (a - 1)) != 0)
      fail("%s: key '%s': alignment %u is not a nonzero power of two", fname(), kAlignmentKey, a);
    f_.alignment_ = a;
  }

  void read_tensor_info(uint64_t i) {
    TensorInfo t;
    set_ctx(Ctx::kTensorIndex, i);
    t.name = read_str("name", kMaxStringLength);
    if (t.name.empty()) fail("%s: tensor %" PRIu64 " has an empty name", fname(), i);
    set_ctx(Ctx::kTensor, i, t.name);
    if (t.name.size() > kMaxTensorNameLength)
      fail("%s: %s: name is %zu bytes, the limit is %zu", fname(), where().c_str(), t.name.size(), kMaxTensorNameLength);
    t.n_dims = read<uint32_t>("n_dims");
    if (t.n_dims > kMaxDims) fail("%s: %s: %u dimensions, at most %u allowed", fname(), where().c_str(), t.n_dims, kMaxDims);
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      t.ne[d] = read<int64_t>("dimension");
      if (t.ne[d] < 0) fail("%s: %s: dimension %u is %" PRId64 ", expected >= 0", fname(), where().c_str(), d, t.ne[d]);
    }
    const uint32_t type_id = read<uint32_t>("type");
    auto tr = quant::type_traits(type_id);
    if (!tr) fail("%s: %s: unknown ggml type id %u", fname(), where().c_str(), type_id);
    t.type = tr->type;
    t.offset = read<uint64_t>("offset");
    size_tensor(t, *tr);
    f_.tensors_.push_back(t);
  }

  void size_tensor(TensorInfo& t, const quant::TypeTraits& tr) {
    int64_t n = 1;
    for (uint32_t d = 0; d < kMaxDims; ++d)
      if (__builtin_mul_overflow(n, t.ne[d], &n))
        fail("%s: %s: shape %s has more than 2^63 elements", fname(), where().c_str(), t.shape_str().c_str());
    t.n_elements = n;
    if (t.ne[0] % tr.block_size != 0)
      fail("%s: %s: row length %" PRId64 " is not a multiple of the %s block size %" PRId64, fname(), where().c_str(),
           t.ne[0], tr.name, tr.block_size);
    // n is a multiple of the block size because ne[0] is.
    if (__builtin_mul_overflow(static_cast<uint64_t>(n / tr.block_size), static_cast<uint64_t>(tr.type_size), &t.n_bytes))
      fail("%s: %s: shape %s of %s is more than 2^64 bytes", fname(), where().c_str(), t.shape_str().c_str(), tr.name);
    if (t.offset % f_.alignment_ != 0)
      fail("%s: %s: data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, fname(), where().c_str(),
           t.offset, f_.alignment_);
  }

  // The data section starts at the first aligned offset after the tensor infos; every tensor must lie in the file.
  void place_data() {
    const uint64_t a = f_.alignment_;
    const uint64_t start = pos_ + (a - pos_ % a) % a;  // pos_ <= size_ < 2^63, no overflow
    f_.data_offset_ = start;
    if (f_.tensors_.empty()) return;
    if (start > size_)
      fail("%s: data section starts at offset %" PRIu64 ", past the end of the file (size %" PRIu64 ")", fname(),
           start, size_);
    const uint64_t room = size_ - start;
    for (TensorInfo& t : f_.tensors_) {
      if (t.offset > room || t.n_bytes > room - t.offset)
        fail("%s: tensor '%s': data [offset %" PRIu64 ", %" PRIu64 " bytes] extends past end of file (size %" PRIu64
             ", data section at %" PRIu64 ")", fname(), printable(t.name).c_str(), t.offset, t.n_bytes, size_, start);
      t.file_offset = start + t.offset;
      t.data = f_.base_ + t.file_offset;
    }
  }

  void check_overlaps() {
    std::vector<const TensorInfo*> order;
    order.reserve(f_.tensors_.size());
    for (const auto& t : f_.tensors_)
      if (t.n_bytes > 0) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const TensorInfo& prev = *order[i - 1];
      const TensorInfo& cur = *order[i];
      if (cur.offset < prev.offset + prev.n_bytes)
        fail("%s: tensor '%s': data [offset %" PRIu64 ", %" PRIu64 " bytes] overlaps tensor '%s' [offset %" PRIu64
             ", %" PRIu64 " bytes]", fname(), printable(cur.name).c_str(), cur.offset, cur.n_bytes,
             printable(prev.name).c_str(), prev.offset, prev.n_bytes);
    }
  }

  File& f_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
  uint64_t n_nested_ = 0;  // inner arrays parsed so far
  // The entry being read, formatted by where() only when reporting an error (formatting per entry is slow).
  enum class Ctx { kHeader, kEntry, kKey, kTensorIndex, kTensor };
  void set_ctx(Ctx kind, uint64_t i, std::string_view name = {}) {
    ctx_kind_ = kind;
    ctx_i_ = i;
    ctx_name_ = name;
  }
  Ctx ctx_kind_ = Ctx::kHeader;
  uint64_t ctx_i_ = 0;
  std::string_view ctx_name_;
  std::vector<uint64_t> index_;  // array element indexes below ctx_
};

// Builds the sorted name indexes (kv_index_ and tensor_index_) and rejects duplicates.
void File::index() {
  auto build = [this](auto& idx, const auto& items, const char* what) {
    idx.clear();
    idx.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      if constexpr (std::is_same_v<std::decay_t<decltype(items[i])>, Value>)
        idx.emplace_back(items[i].key(), i);
      else
        idx.emplace_back(items[i].name, i);
    }
    std::sort(idx.begin(), idx.end());
    for (size_t i = 1; i < idx.size(); ++i)
      if (idx[i].first == idx[i - 1].first)
        fail("%s: duplicate %s '%s' (entries %zu and %zu)", name_.c_str(), what, printable(idx[i].first).c_str(),
             idx[i - 1].second, idx[i].second);
  };
  build(kv_index_, kv_, "key");
  build(tensor_index_, tensors_, "tensor name");
}

File File::parse(std::string name, const uint8_t* data, size_t size) {
  File f;
  f.name_ = std::move(name);
  f.base_ = data;
  f.size_ = size;
  Parser(f).run();
  return f;
}

File File::open(const std::string& path) {
  auto map = std::make_unique<MappedFile>(path);
  File f = parse(path, map->data(), map->size());
  f.map_ = std::move(map);  // the mapping does not move: views into it stay valid
  return f;
}

template <typename Idx>
static const std::pair<std::string_view, size_t>* lookup(const Idx& idx, std::string_view name) {
  auto it = std::lower_bound(idx.begin(), idx.end(), name, [](const auto& e, std::string_view n) { return e.first < n; });
  return it != idx.end() && it->first == name ? &*it : nullptr;
}

const Value* File::find(std::string_view key) const {
  auto* e = lookup(kv_index_, key);
  return e ? &kv_[e->second] : nullptr;
}

const Value& File::get(std::string_view key) const {
  if (const Value* v = find(key)) return *v;
  fail("%s: missing required key '%s'", name_.c_str(), printable(key).c_str());
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto* e = lookup(tensor_index_, name);
  return e ? &tensors_[e->second] : nullptr;
}

const TensorInfo& File::get_tensor(std::string_view name) const {
  if (const TensorInfo* t = find_tensor(name)) return *t;
  fail("%s: missing required tensor '%s'", name_.c_str(), printable(name).c_str());
}

// Typed getters: Value's errors name the key; these add the file name.
template <typename F>
static auto with_file(const std::string& name, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    fail("%s: %s", name.c_str(), e.what());
  }
}

static uint32_t to_u32(const Value& v) {
  const uint64_t x = v.to_u64();
  if (x > UINT32_MAX) fail("key '%s': value %" PRIu64 " does not fit in u32", printable(v.key()).c_str(), x);
  return static_cast<uint32_t>(x);
}

static float to_f32(const Value& v) {
  if (v.type() == ValueType::F32) return v.as_f32();
  if (v.type() == ValueType::F64) return static_cast<float>(v.as_f64());
  fail("key '%s': expected f32, found %s", printable(v.key()).c_str(), v.describe().c_str());
}

static const Value& arr(const Value& v) {
  (void)v.as_array();  // throws naming the key when not an array
  return v;
}

uint32_t File::get_u32(std::string_view key) const { return with_file(name_, [&] { return to_u32(get(key)); }); }
uint64_t File::get_u64(std::string_view key) const { return with_file(name_, [&] { return get(key).to_u64(); }); }
int64_t File::get_i64(std::string_view key) const { return with_file(name_, [&] { return get(key).to_i64(); }); }
float File::get_f32(std::string_view key) const { return with_file(name_, [&] { return to_f32(get(key)); }); }
bool File::get_bool(std::string_view key) const { return with_file(name_, [&] { return get(key).as_bool(); }); }
std::string_view File::get_str(std::string_view key) const {
  return with_file(name_, [&] { return get(key).as_str(); });
}
const Value& File::get_arr(std::string_view key) const {
  return with_file(name_, [&]() -> const Value& { return arr(get(key)); });
}

template <typename T, typename F>
static std::optional<T> opt(const File& f, std::string_view key, F&& conv) {
  const Value* v = f.find(key);
  if (!v) return std::nullopt;
  return with_file(f.name(), [&] { return std::optional<T>(conv(*v)); });
}

std::optional<uint32_t> File::opt_u32(std::string_view key) const { return opt<uint32_t>(*this, key, to_u32); }
std::optional<uint64_t> File::opt_u64(std::string_view key) const {
  return opt<uint64_t>(*this, key, [](const Value& v) { return v.to_u64(); });
}
std::optional<int64_t> File::opt_i64(std::string_view key) const {
  return opt<int64_t>(*this, key, [](const Value& v) { return v.to_i64(); });
}
std::optional<float> File::opt_f32(std::string_view key) const { return opt<float>(*this, key, to_f32); }
std::optional<bool> File::opt_bool(std::string_view key) const {
  return opt<bool>(*this, key, [](const Value& v) { return v.as_bool(); });
}
std::optional<std::string_view> File::opt_str(std::string_view key) const {
  return opt<std::string_view>(*this, key, [](const Value& v) { return v.as_str(); });
}
const Value* File::opt_arr(std::string_view key) const {
  const Value* v = find(key);
  if (v) with_file(name_, [&] { return &arr(*v); });
  return v;
}

}  // namespace tern::gguf
