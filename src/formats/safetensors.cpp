// safetensors layout: u64 little-endian header length N, N bytes of UTF-8 JSON (an object: tensor name ->
// {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional "__metadata__" string map), then the
// data section; offsets are relative to its start. Rules as in huggingface/safetensors (validate()).
#include "formats/safetensors.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace tern::safetensors {

namespace {

struct DTypeRow {
  DType t;
  const char* name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::F64, "F64", 8},         {DType::F32, "F32", 4},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},       {DType::I64, "I64", 8},         {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},         {DType::I8, "I8", 1},           {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},       {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::U16, "U16", 2},         {DType::U32, "U32", 4},         {DType::U64, "U64", 8},
};

std::string known_dtypes() {
  std::string s;
  for (const DTypeRow& r : kDTypes) s += (s.empty() ? "" : ", ") + std::string(r.name);
  return s;
}

using Json = nlohmann::json;

// SAX pass that records the first duplicate key of any object (nlohmann's DOM parse keeps the last silently,
// and its callback parser is quadratic in the number of keys of one object).
struct DupKeyFinder : nlohmann::json_sax<Json> {
  std::vector<std::set<std::string>> open;
  std::string dup, error;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!open.back().insert(k).second) {
      dup = k;
      return false;  // stop: one duplicate is enough
    }
    return true;
  }
  bool end_object() override {
    open.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }
};

// Parses the header JSON, rejecting duplicate keys in any object.
Json parse_json(const std::string& file, const char* text, size_t n) {
  DupKeyFinder sax;
  Json::sax_parse(text, text + n, &sax);
  if (!sax.dup.empty()) fail("%s: header: duplicate key '%s'", file.c_str(), sax.dup.c_str());
  if (!sax.error.empty()) fail("%s: header is not valid JSON: %s", file.c_str(), sax.error.c_str());
  Json j;
  try {
    j = Json::parse(text, text + n);
  } catch (const Json::exception& e) {
    fail("%s: header is not valid JSON: %s", file.c_str(), e.what());
  }
  if (!j.is_object()) fail("%s: header is not a JSON object", file.c_str());
  return j;
}

uint64_t get_u64(const std::string& file, const std::string& name, const Json& v, const char* what) {
  if (!v.is_number_unsigned()) fail("%s: tensor '%s': %s is not a non-negative integer", file.c_str(), name.c_str(), what);
  return v.get<uint64_t>();
}

}  // namespace

const char* dtype_name(DType t) {
  for (const DTypeRow& r : kDTypes)
    if (r.t == t) return r.name;
  return "?";
}
size_t dtype_size(DType t) {
  for (const DTypeRow& r : kDTypes)
    if (r.t == t) return r.size;
  return 0;
}
std::optional<DType> dtype_from_name(std::string_view s) {
  for (const DTypeRow& r : kDTypes)
    if (s == r.name) return r.t;
  return std::nullopt;
}

std::string TensorInfo::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

File File::open(const std::string& path) {
  File f;
  f.name_ = path;
  f.map_ = std::make_unique<MappedFile>(path);
  f.base_ = f.map_->data();
  f.size_ = f.map_->size();
  f.parse_header();
  return f;
}

File File::parse(std::string name, const uint8_t* data, size_t size) {
  File f;
  f.name_ = std::move(name);
  f.base_ = data;
  f.size_ = size;
  f.parse_header();
  return f;
}

const TensorInfo* File::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

void File::parse_header() {
  const char* fn = name_.c_str();
  if (size_ < 8) fail("%s: %" PRIu64 " bytes, too small for a safetensors header length", fn, size_);
  uint64_t n;
  std::memcpy(&n, base_, 8);
  if (n > kMaxHeaderSize) fail("%s: header length %" PRIu64 " exceeds the %" PRIu64 "-byte limit", fn, n, kMaxHeaderSize);
  if (n > size_ - 8)
    fail("%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes)", fn, n, size_);
  if (n < 2 || base_[8] != '{') fail("%s: header does not start with a JSON object", fn);
  header_size_ = n;
  const uint64_t data_size = size_ - 8 - n;
  const uint8_t* data = base_ + 8 + n;
  Json j = parse_json(name_, reinterpret_cast<const char*>(base_ + 8), n);

  for (auto& [key, v] : j.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) fail("%s: __metadata__ is not an object", fn);
      for (auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) fail("%s: __metadata__['%s'] is not a string", fn, mk.c_str());
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const char* tn = key.c_str();
    if (key.empty()) fail("%s: empty tensor name", fn);
    if (!v.is_object()) fail("%s: tensor '%s': entry is not an object", fn, tn);
    for (auto& [fk, fv] : v.items())
      if (fk != "dtype" && fk != "shape" && fk != "data_offsets")
        fail("%s: tensor '%s': unknown field '%s'", fn, tn, fk.c_str());
    TensorInfo t;
    t.name = key;
    if (!v.contains("dtype") || !v["dtype"].is_string()) fail("%s: tensor '%s': missing string 'dtype'", fn, tn);
    const std::string ds = v["dtype"].get<std::string>();
    auto dt = dtype_from_name(ds);
    if (!dt) fail("%s: tensor '%s': unknown dtype '%s' (known: %s)", fn, tn, ds.c_str(), known_dtypes().c_str());
    t.dtype = *dt;
    if (!v.contains("shape") || !v["shape"].is_array()) fail("%s: tensor '%s': missing array 'shape'", fn, tn);
    if (v["shape"].size() > kMaxDims) fail("%s: tensor '%s': %zu dims, at most %zu supported", fn, tn, v["shape"].size(), kMaxDims);
    uint64_t count = 1;
    for (const Json& d : v["shape"]) {
      const uint64_t x = get_u64(name_, key, d, "a shape entry");
      if (x > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(count, x, &count) || count > static_cast<uint64_t>(INT64_MAX))
        fail("%s: tensor '%s': shape overflows", fn, tn);
      t.shape.push_back(static_cast<int64_t>(x));
    }
    t.n_elements = static_cast<int64_t>(count);
    const Json* off = v.contains("data_offsets") ? &v["data_offsets"] : nullptr;
    if (!off || !off->is_array() || off->size() != 2) fail("%s: tensor '%s': 'data_offsets' must be [begin, end]", fn, tn);
    t.begin = get_u64(name_, key, (*off)[0], "data_offsets[0]");
    t.end = get_u64(name_, key, (*off)[1], "data_offsets[1]");
    if (t.end < t.begin) fail("%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] are reversed", fn, tn, t.begin, t.end);
    uint64_t bytes;
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(dtype_size(t.dtype)), &bytes))
      fail("%s: tensor '%s': byte size overflows", fn, tn);
    if (t.end - t.begin != bytes)
      fail("%s: tensor '%s': %s %s is %" PRIu64 " bytes but data_offsets span %" PRIu64, fn, tn, ds.c_str(),
           t.shape_str().c_str(), bytes, t.end - t.begin);
    if (t.end > data_size)
      fail("%s: tensor '%s': data_offsets end %" PRIu64 " is past the data section (%" PRIu64 " bytes)", fn, tn, t.end, data_size);
    t.data = data + t.begin;
    tensors_.push_back(std::move(t));
  }

  // Tensors must tile [0, data_size) exactly: sorted by offset, each starts where the previous ended.
  std::vector<const TensorInfo*> by_off;
  for (const TensorInfo& t : tensors_) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : by_off) {
    if (t->begin < at)
      fail("%s: tensor '%s' [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s'", fn, t->name.c_str(), t->begin, t->end,
           prev->name.c_str());
    if (t->begin > at)
      fail("%s: tensor '%s' starts at %" PRIu64 ", leaving a hole after byte %" PRIu64, fn, t->name.c_str(), t->begin, at);
    at = t->end;
    prev = t;
  }
  if (at != data_size)
    fail("%s: tensors cover %" PRIu64 " bytes but the data section has %" PRIu64, fn, at, data_size);
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
}

}  // namespace tern::safetensors
