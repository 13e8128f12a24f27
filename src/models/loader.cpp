#include "models/loader.h"

#include "core/error.h"
#include "core/mmap.h"
#include "quant/convert.h"
#include "quant/repack.h"

namespace tern::models {

const gguf::TensorInfo& Loader::tensor(const std::string& name, std::vector<int64_t> shape) {
  const gguf::TensorInfo* t = f_.find_tensor(name);
  if (!t) fail("%s: missing tensor '%s'", f_.name().c_str(), name.c_str());
  bool ok = true;
  for (size_t i = 0; i < 4; ++i) ok &= t->ne[i] == (i < shape.size() ? shape[i] : 1);
  if (!ok) {
    std::string want = "[";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    fail("%s: tensor '%.*s': shape %s, expected %s]", f_.name().c_str(), static_cast<int>(t->name.size()),
         t->name.data(), t->shape_str().c_str(), want.c_str());
  }
  used_.insert(name);
  return *t;
}

Linear Loader::to_linear(const gguf::TensorInfo& t, const std::string& name) {
  if (!be_.has_kernels(t.type))
    fail("%s: tensor '%s' has type %s, which tern's %s backend cannot compute with", f_.name().c_str(), name.c_str(),
         quant::type_name(t.type), be_.name().c_str());
  Linear l;
  l.type = t.type;
  l.data = be_.map_weights(t.data, t.n_bytes);
  l.n_in = t.ne[0];
  l.n_out = t.ne[1] * t.ne[2] * t.ne[3];
  l.row_bytes = quant::row_size(quant::traits(t.type), t.ne[0]);
  l.name = name;
  return l;
}

backend::Floats Loader::vec(const std::string& name, std::vector<int64_t> shape) {
  const gguf::TensorInfo& t = tensor(name, shape);
  std::vector<float> out(static_cast<size_t>(t.n_elements));
  quant::dequantize_row(t.type, t.data, out.data(), t.n_elements);
  return backend::Floats(be_, out);
}

std::vector<std::string> Loader::unused() const {
  std::vector<std::string> u;
  for (const auto& t : f_.tensors())
    if (!used_.count(std::string(t.name))) u.emplace_back(t.name);
  return u;
}

int64_t KeyReader::req(const char* k, int64_t lo, int64_t hi) const {
  const std::string name = key(k);
  const int64_t v = static_cast<int64_t>(f.get_u64(name));
  if (v < lo || v > hi)
    fail("%s: key %s = %lld, expected %lld..%lld", f.name().c_str(), name.c_str(), static_cast<long long>(v),
         static_cast<long long>(lo), static_cast<long long>(hi));
  return v;
}

std::string blk(int64_t i, const char* name) { return "blk." + std::to_string(i) + "." + name; }

void Repacker::one(Linear& w, bool drop_source) {
  if (!w.present() || w.repacked) return;
  if (w.n_out < quant::kRepackRows) return;  // a lone row stays as it is (the memory planner counts it so)
  if (!be_.can_repack(w)) {
    if (w.type != quant::Type::F32) rep_.kept.push_back(w.name + " (" + quant::type_name(w.type) + ": no repacked layout)");
    return;
  }
  std::unique_ptr<backend::Buffer> buf = be_.alloc(backend::BufferKind::kWeights, be_.repacked_bytes(w));
  const Linear src = w;
  w = be_.repack_into(src, buf->data(), true);
  owned_.push_back(std::move(buf));
  ++rep_.matrices;
  rep_.bytes += w.bytes();
  const bool in_file = src.data >= f_.base() && src.data + src.bytes() <= f_.base() + f_.file_size();
  if (drop_source && in_file) {  // (a matrix rearranged at load lives in its own buffer, freed with the model)
    rep_.file_bytes += src.bytes();
    drop_pages(src.data, src.bytes());
  }
}

}  // namespace tern::models
