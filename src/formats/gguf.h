// GGUF reader: a zero-copy view of a GGUF v2/v3 file (memory-mapped, or a caller-owned buffer for fuzzing).
// Every count, length, shape, type and offset is validated against the buffer before it is used, and no
// allocation is sized by an unchecked number; any violation throws tern::Error naming the file, the key or
// tensor and what was expected. Strings and tensor data point into the buffer. Rules: docs/FORMATS.md.
// Non-goals: big-endian files, GGUF v1, editing (see gguf_writer.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/mmap.h"
#include "quant/types.h"

namespace tern::gguf {

// Limits. ggml uses the same 1 GiB cap on strings and array lengths (gguf.cpp GGUF_MAX_*); the rest are ours.
constexpr uint32_t kMagic = 0x46554747;                 // "GGUF" little-endian
constexpr uint32_t kMinVersion = 2, kMaxVersion = 3;
constexpr uint64_t kMaxStringLength = 1ull << 30;       // bytes in one string value
constexpr uint64_t kMaxKeyLength = 1ull << 16;          // bytes in a metadata key
constexpr size_t kMaxTensorNameLength = 63;             // ggml: GGML_MAX_NAME (64) including the NUL
constexpr uint64_t kMaxArrayLength = 1ull << 30;        // elements in one array
constexpr int kMaxArrayDepth = 8;                       // arrays of arrays of ... (1 = a plain array)
constexpr uint64_t kMaxNestedArrays = 1ull << 20;       // inner arrays in one file, all keys together
constexpr uint32_t kMaxDims = 4;                        // ggml: GGML_MAX_DIMS
constexpr uint32_t kDefaultAlignment = 32;              // ggml: GGUF_DEFAULT_ALIGNMENT
constexpr const char* kAlignmentKey = "general.alignment";

// Metadata value type ids as stored in the file (gguf.h enum gguf_type).
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
const char* value_type_name(ValueType t);  // "u8", "str", "arr", ...
size_t value_type_size(ValueType t);       // bytes of a fixed-size scalar; 0 for String and Array

class Value;

// Index of alternative T in variant V (the variant's order is the GGUF value type id order).
template <typename T, typename V, size_t I = 0>
constexpr size_t variant_index() {
  if constexpr (std::is_same_v<std::variant_alternative_t<I, V>, T>) return I;
  else return variant_index<T, V, I + 1>();
}

// An array value. Fixed-size elements stay in the file (little-endian, possibly unaligned: read them with
// the accessors); strings are views into the file; nested arrays are parsed Values.
struct Array {
  ValueType type = ValueType::U8;  // element type
  uint64_t size = 0;               // number of elements
  const uint8_t* raw = nullptr;    // size * value_type_size(type) bytes when type is a fixed-size scalar
  std::vector<std::string_view> strings;  // type == String
  std::vector<Value> arrays;              // type == Array
};

// One metadata value. Typed getters are strict (as_u32 on an i32 throws); to_i64/to_u64/to_f64 convert any
// numeric value and throw when it does not fit. Every error names the key the value belongs to.
class Value {
 public:
  using Data = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string_view,
                            Array, uint64_t, int64_t, double>;
  Value(std::string_view key, Data data) : key_(key), data_(std::move(data)) {}

  std::string_view key() const { return key_; }
  ValueType type() const { return static_cast<ValueType>(data_.index()); }
  bool is_array() const { return type() == ValueType::Array; }
  bool is_integer() const;
  bool is_float() const { return type() == ValueType::F32 || type() == ValueType::F64; }

  uint8_t as_u8() const { return get<uint8_t>(); }
  int8_t as_i8() const { return get<int8_t>(); }
  uint16_t as_u16() const { return get<uint16_t>(); }
  int16_t as_i16() const { return get<int16_t>(); }
  uint32_t as_u32() const { return get<uint32_t>(); }
  int32_t as_i32() const { return get<int32_t>(); }
  uint64_t as_u64() const { return get<uint64_t>(); }
  int64_t as_i64() const { return get<int64_t>(); }
  float as_f32() const { return get<float>(); }
  double as_f64() const { return get<double>(); }
  bool as_bool() const { return get<bool>(); }
  std::string_view as_str() const { return get<std::string_view>(); }
  const Array& as_array() const { return get<Array>(); }

  int64_t to_i64() const;   // any integer type (u64 above INT64_MAX throws) or bool
  uint64_t to_u64() const;  // any integer type (negative throws) or bool
  double to_f64() const;    // any numeric type

  // Array element accessors (this must be an array; index checked; element type checked like the scalars).
  uint64_t array_size() const { return as_array().size; }
  ValueType array_type() const { return as_array().type; }
  int64_t array_i64(uint64_t i) const;    // integer or bool elements
  double array_f64(uint64_t i) const;     // numeric elements
  std::string_view array_str(uint64_t i) const;
  std::vector<int64_t> to_i64_vector() const;
  std::vector<double> to_f64_vector() const;

  std::string describe() const;  // short human form: `u32 4`, `str "qwen35moe"`, `arr[str,151936]`

 private:
  template <typename T>
  const T& get() const;
  [[noreturn]] void type_error(const char* wanted) const;
  std::string_view key_;
  Data data_;
};

template <typename T>
const T& Value::get() const {
  if (const T* p = std::get_if<T>(&data_)) return *p;
  type_error(value_type_name(static_cast<ValueType>(variant_index<T, Data>())));
}

struct TensorInfo {
  std::string_view name;
  quant::Type type;
  uint32_t n_dims = 0;        // as stored (0..4); ne has 1 in the unused trailing dimensions
  int64_t ne[kMaxDims] = {1, 1, 1, 1};  // ggml order: ne[0] is the fastest-varying (row length)
  int64_t n_elements = 0;
  uint64_t n_bytes = 0;
  uint64_t offset = 0;        // from the start of the data section (a multiple of alignment())
  uint64_t file_offset = 0;   // from the start of the file
  const uint8_t* data = nullptr;  // n_bytes bytes inside the file

  std::string shape_str() const;  // "[4096, 512, 128]"
};

class File {
 public:
  // Maps and parses a file; throws Error naming `path`.
  static File open(const std::string& path);
  // Parses a caller-owned buffer that must outlive the File (fuzzing, tests); `name` is used in messages.
  static File parse(std::string name, const uint8_t* data, size_t size);

  File(File&&) noexcept = default;
  File& operator=(File&&) noexcept = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the (aligned) data section
  const uint8_t* base() const { return base_; }           // the whole file's bytes (memory-mapped)

  const std::vector<Value>& metadata() const { return kv_; }  // in file order
  const Value* find(std::string_view key) const;
  const Value& get(std::string_view key) const;  // throws naming the file and key when absent

  // Required (throw when absent or of the wrong type) and optional (nullopt when absent, throw when present
  // with the wrong type) typed getters. Integer getters accept any integer type whose value fits.
  uint32_t get_u32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;  // f32 or f64
  bool get_bool(std::string_view key) const;
  std::string_view get_str(std::string_view key) const;
  const Value& get_arr(std::string_view key) const;
  std::optional<uint32_t> opt_u32(std::string_view key) const;
  std::optional<uint64_t> opt_u64(std::string_view key) const;
  std::optional<int64_t> opt_i64(std::string_view key) const;
  std::optional<float> opt_f32(std::string_view key) const;
  std::optional<bool> opt_bool(std::string_view key) const;
  std::optional<std::string_view> opt_str(std::string_view key) const;
  const Value* opt_arr(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in file order
  const TensorInfo* find_tensor(std::string_view name) const;
  const TensorInfo& get_tensor(std::string_view name) const;  // throws naming the file and tensor

 private:
  File() = default;
  friend class Parser;
  void index();
  std::string name_;
  std::unique_ptr<MappedFile> map_;  // null when parsing a caller-owned buffer
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<Value> kv_;
  std::vector<TensorInfo> tensors_;
  std::vector<std::pair<std::string_view, size_t>> kv_index_, tensor_index_;  // sorted by name
};

}  // namespace tern::gguf
