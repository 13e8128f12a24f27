// GGUF metadata values: type names, strict and converting getters, array element access.
#include <cinttypes>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_util.h"

namespace tern::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "str";
    case ValueType::Array: return "arr";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "?";
}

size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::Bool: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::String: case ValueType::Array: return 0;
  }
  return 0;
}

void Value::type_error(const char* wanted) const {
  fail("key '%s': expected %s, found %s", printable(key_).c_str(), wanted, describe().c_str());
}

bool Value::is_integer() const {
  switch (type()) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16: case ValueType::U32:
    case ValueType::I32: case ValueType::U64: case ValueType::I64: return true;
    default: return false;
  }
}

// Integer payload widened to (negative?, magnitude-or-value) without loss.
struct Wide {
  bool ok;
  bool neg;
  uint64_t u;  // value when !neg
  int64_t i;   // value when neg
};

static Wide widen(const Value::Data& d) {
  return std::visit(
      [](const auto& v) -> Wide {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return {true, false, v ? 1u : 0u, 0};
        } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
          if (v < 0) return {true, true, 0, static_cast<int64_t>(v)};
          return {true, false, static_cast<uint64_t>(v), 0};
        } else if constexpr (std::is_integral_v<T>) {
          return {true, false, static_cast<uint64_t>(v), 0};
        } else {
          return {false, false, 0, 0};
        }
      },
      d);
}

int64_t Value::to_i64() const {
  Wide w = widen(data_);
  if (!w.ok) type_error("an integer");
  if (w.neg) return w.i;
  if (w.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail("key '%s': value %" PRIu64 " does not fit in i64", printable(key_).c_str(), w.u);
  return static_cast<int64_t>(w.u);
}

uint64_t Value::to_u64() const {
  Wide w = widen(data_);
  if (!w.ok) type_error("an integer");
  if (w.neg) fail("key '%s': expected a non-negative integer, found %" PRId64, printable(key_).c_str(), w.i);
  return w.u;
}

double Value::to_f64() const {
  if (type() == ValueType::F32) return as_f32();
  if (type() == ValueType::F64) return as_f64();
  Wide w = widen(data_);
  if (!w.ok) type_error("a number");
  return w.neg ? static_cast<double>(w.i) : static_cast<double>(w.u);
}

// Reads element i of a fixed-size array as the Data alternative of its element type.
static Value::Data element(const Array& a, uint64_t i) {
  const uint8_t* p = a.raw + i * value_type_size(a.type);
  switch (a.type) {
    case ValueType::U8: return load_le<uint8_t>(p);
    case ValueType::I8: return load_le<int8_t>(p);
    case ValueType::U16: return load_le<uint16_t>(p);
    case ValueType::I16: return load_le<int16_t>(p);
    case ValueType::U32: return load_le<uint32_t>(p);
    case ValueType::I32: return load_le<int32_t>(p);
    case ValueType::F32: return load_le<float>(p);
    case ValueType::Bool: return load_le<uint8_t>(p) != 0;
    case ValueType::U64: return load_le<uint64_t>(p);
    case ValueType::I64: return load_le<int64_t>(p);
    case ValueType::F64: return load_le<double>(p);
    default: break;
  }
  fail("internal: element() on a %s array", value_type_name(a.type));
}

static void check_index(std::string_view key, const Array& a, uint64_t i) {
  if (i >= a.size)
    fail("key '%s': index %" PRIu64 " out of range (array of %" PRIu64 ")", printable(key).c_str(), i, a.size);
}

int64_t Value::array_i64(uint64_t i) const {
  const Array& a = as_array();
  check_index(key_, a, i);
  if (value_type_size(a.type) == 0 || a.type == ValueType::F32 || a.type == ValueType::F64)
    fail("key '%s': expected an array of integers, found arr[%s]", printable(key_).c_str(), value_type_name(a.type));
  return Value(key_, element(a, i)).to_i64();
}

double Value::array_f64(uint64_t i) const {
  const Array& a = as_array();
  check_index(key_, a, i);
  if (value_type_size(a.type) == 0)
    fail("key '%s': expected an array of numbers, found arr[%s]", printable(key_).c_str(), value_type_name(a.type));
  return Value(key_, element(a, i)).to_f64();
}

std::string_view Value::array_str(uint64_t i) const {
  const Array& a = as_array();
  check_index(key_, a, i);
  if (a.type != ValueType::String)
    fail("key '%s': expected an array of strings, found arr[%s]", printable(key_).c_str(), value_type_name(a.type));
  return a.strings[i];
}

std::vector<int64_t> Value::to_i64_vector() const {
  std::vector<int64_t> out;
  const uint64_t n = array_size();
  out.reserve(n);  // n elements are present in the file (checked by the parser)
  for (uint64_t i = 0; i < n; ++i) out.push_back(array_i64(i));
  return out;
}

std::vector<double> Value::to_f64_vector() const {
  std::vector<double> out;
  const uint64_t n = array_size();
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i) out.push_back(array_f64(i));
  return out;
}

std::string Value::describe() const {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Array>) {
          return strf("arr[%s,%" PRIu64 "]", value_type_name(v.type), v.size);
        } else if constexpr (std::is_same_v<T, std::string_view>) {
          return "str \"" + printable(v, 60) + "\"";
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "bool true" : "bool false";
        } else if constexpr (std::is_floating_point_v<T>) {
          return strf("%s %.9g", std::is_same_v<T, float> ? "f32" : "f64", static_cast<double>(v));
        } else if constexpr (std::is_signed_v<T>) {
          return strf("%s %" PRId64, value_type_name(static_cast<ValueType>(variant_index<T, Data>())),
                      static_cast<int64_t>(v));
        } else {
          return strf("%s %" PRIu64, value_type_name(static_cast<ValueType>(variant_index<T, Data>())),
                      static_cast<uint64_t>(v));
        }
      },
      data_);
}

std::string TensorInfo::shape_str() const {
  std::string s = "[";
  for (uint32_t d = 0; d < n_dims; ++d) s += strf(d ? ", %" PRId64 : "%" PRId64, ne[d]);
  return s + "]";
}

}  // namespace tern::gguf
