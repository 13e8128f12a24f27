// GGUF v3 writer: metadata of every value type (arrays of arrays included) and tensors, laid out as ggml does
// (data section aligned, each tensor at an aligned offset, in the order added). write() goes through a
// temporary file in the same directory and renames it, so the final path never holds a half-written file.
// Non-goals: editing an existing file in place, big-endian output.
#pragma once
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf.h"
#include "quant/types.h"

namespace tern::gguf {

// One encoded metadata value (type tag + little-endian payload), the unit arrays are built from.
class Node {
 public:
  static Node u8(uint8_t v);
  static Node i8(int8_t v);
  static Node u16(uint16_t v);
  static Node i16(int16_t v);
  static Node u32(uint32_t v);
  static Node i32(int32_t v);
  static Node f32(float v);
  static Node boolean(bool v);
  static Node str(std::string_view v);
  static Node u64(uint64_t v);
  static Node i64(int64_t v);
  static Node f64(double v);
  // An array whose items all have type `elem` (checked; for nested arrays every item is an Array node).
  static Node array(ValueType elem, const std::vector<Node>& items);
  // Arrays of plain values.
  template <typename T>
  static Node array_of(std::span<const T> v);
  static Node array_of_bool(const std::vector<bool>& v);
  static Node array_of_str(std::span<const std::string> v);

  ValueType type() const { return type_; }
  const std::vector<uint8_t>& payload() const { return payload_; }  // the value's bytes without its type tag

 private:
  Node(ValueType t) : type_(t) {}
  ValueType type_;
  std::vector<uint8_t> payload_;
};

class Writer {
 public:
  // An alignment other than the default is recorded as general.alignment (u32) ahead of other keys.
  explicit Writer(uint32_t alignment = kDefaultAlignment);

  void add(const std::string& key, const Node& value);  // throws on an empty or duplicate key
  void add_u8(const std::string& k, uint8_t v) { add(k, Node::u8(v)); }
  void add_i8(const std::string& k, int8_t v) { add(k, Node::i8(v)); }
  void add_u16(const std::string& k, uint16_t v) { add(k, Node::u16(v)); }
  void add_i16(const std::string& k, int16_t v) { add(k, Node::i16(v)); }
  void add_u32(const std::string& k, uint32_t v) { add(k, Node::u32(v)); }
  void add_i32(const std::string& k, int32_t v) { add(k, Node::i32(v)); }
  void add_f32(const std::string& k, float v) { add(k, Node::f32(v)); }
  void add_bool(const std::string& k, bool v) { add(k, Node::boolean(v)); }
  void add_str(const std::string& k, std::string_view v) { add(k, Node::str(v)); }
  void add_u64(const std::string& k, uint64_t v) { add(k, Node::u64(v)); }
  void add_i64(const std::string& k, int64_t v) { add(k, Node::i64(v)); }
  void add_f64(const std::string& k, double v) { add(k, Node::f64(v)); }
  template <typename T>
  void add_array(const std::string& k, std::span<const T> v) { add(k, Node::array_of<T>(v)); }
  template <typename T>
  void add_array(const std::string& k, const std::vector<T>& v) { add(k, Node::array_of<T>(std::span<const T>(v))); }
  void add_array(const std::string& k, const std::vector<bool>& v) { add(k, Node::array_of_bool(v)); }
  void add_array(const std::string& k, const std::vector<std::string>& v) { add(k, Node::array_of_str(v)); }

  // ne in ggml order (ne[0] fastest), 1..4 dims; bytes must be exactly the size type and shape imply.
  // add_tensor copies the bytes; add_tensor_view keeps a pointer that must stay valid until write()/serialize().
  void add_tensor(const std::string& name, quant::Type type, std::vector<int64_t> ne, std::span<const uint8_t> bytes);
  void add_tensor_view(const std::string& name, quant::Type type, std::vector<int64_t> ne,
                       std::span<const uint8_t> bytes);

  void write(const std::string& path) const;  // throws Error naming path; no partial file at path on failure
  std::vector<uint8_t> serialize() const;     // the same bytes in memory (tests, fuzz seeds)

 private:
  struct Tensor {
    std::string name;
    quant::Type type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> owned;
    std::span<const uint8_t> bytes;
    uint64_t offset;
  };
  template <typename Sink>
  void emit(Sink&& sink) const;
  uint32_t alignment_;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_bytes_;  // encoded metadata entries in insertion order
  std::set<std::string, std::less<>> keys_, tensor_names_;
  std::vector<Tensor> tensors_;
  uint64_t data_size_ = 0;  // aligned end of the last tensor
};

}  // namespace tern::gguf
