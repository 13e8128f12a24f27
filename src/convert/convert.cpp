// The conversion driver: prepare (classify, plan, types, metadata — no tensor data), then stream the GGUF:
// header (KV + tensor infos, offsets known from the plan), then each tensor in plan order, 32-byte aligned as
// ggml lays it out (gguf_writer.cpp emits the same layout; it keeps every tensor in memory, hence this loop).
#include "convert/convert.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"

namespace tern::convert {

namespace {

constexpr uint64_t kAlign = 32;  // GGUF default alignment (no general.alignment key)

char g_temp_path[4096];          // the in-progress temporary file, for the signal handler
std::atomic<bool> g_temp_live{false};

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

template <typename T>
void put(std::vector<uint8_t>& o, T v) {
  const size_t at = o.size();
  o.resize(at + sizeof(T));
  std::memcpy(o.data() + at, &v, sizeof(T));
}
void put_str(std::vector<uint8_t>& o, const std::string& s) {
  put<uint64_t>(o, s.size());
  o.insert(o.end(), s.begin(), s.end());
}

uint64_t tensor_bytes(const OutTensor& t, quant::Type ty) {
  const auto& tr = quant::traits(ty);
  return static_cast<uint64_t>(t.n_elements() / tr.block_size) * tr.type_size;
}

std::vector<uint8_t> header_bytes(const Prepared& p) {
  std::vector<uint8_t> h;
  put<uint32_t>(h, 0x46554747);  // "GGUF"
  put<uint32_t>(h, 3);
  put<uint64_t>(h, p.plan.tensors.size());
  put<uint64_t>(h, p.kv.size());
  for (const auto& [k, node] : p.kv) {
    put_str(h, k);
    put<uint32_t>(h, static_cast<uint32_t>(node.type()));
    h.insert(h.end(), node.payload().begin(), node.payload().end());
  }
  uint64_t off = 0;
  for (size_t i = 0; i < p.plan.tensors.size(); ++i) {
    const OutTensor& t = p.plan.tensors[i];
    if (t.name.size() > gguf::kMaxTensorNameLength) fail("tensor name '%s' is too long for GGUF", t.name.c_str());
    put_str(h, t.name);
    const std::vector<int64_t> ne = t.ne();
    put<uint32_t>(h, static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) put<int64_t>(h, d);
    put<uint32_t>(h, static_cast<uint32_t>(p.types[i]));
    put<uint64_t>(h, off);
    off += align_up(tensor_bytes(t, p.types[i]));
  }
  h.resize(align_up(h.size()), 0);
  return h;
}

// Temporary output next to the final path; removed unless commit() succeeds.
class TempOut {
 public:
  explicit TempOut(const std::string& final_path) : final_(final_path) {
    std::string tmpl = final_path + ".tmp-XXXXXX";
    if (tmpl.size() >= sizeof(g_temp_path)) fail("%s: output path too long", final_path.c_str());
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    const int fd = ::mkstemp(buf.data());
    if (fd < 0) fail("%s: cannot create a temporary file next to it: %s", final_path.c_str(), std::strerror(errno));
    path_ = buf.data();
    std::memcpy(g_temp_path, buf.data(), buf.size());
    g_temp_live = true;
    f_ = ::fdopen(fd, "wb");
    if (!f_) {
      ::close(fd);
      cleanup();
      fail("%s: cannot open: %s", path_.c_str(), std::strerror(errno));
    }
  }
  ~TempOut() {
    if (f_) std::fclose(f_);
    if (!committed_) cleanup();
  }
  void write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n)
      fail("%s: write failed after %" PRIu64 " bytes: %s (disk full?)", path_.c_str(), written_, std::strerror(errno));
    written_ += n;
  }
  void pad_to_align() {
    static const uint8_t zeros[kAlign] = {};
    write(zeros, static_cast<size_t>(align_up(written_) - written_));
  }
  void commit() {
    if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0)
      fail("%s: write failed: %s (disk full?)", path_.c_str(), std::strerror(errno));
    FILE* f = f_;
    f_ = nullptr;
    if (std::fclose(f) != 0) fail("%s: close failed: %s", path_.c_str(), std::strerror(errno));
    if (std::rename(path_.c_str(), final_.c_str()) != 0)
      fail("%s: cannot rename to %s: %s", path_.c_str(), final_.c_str(), std::strerror(errno));
    committed_ = true;
    g_temp_live = false;
  }
  uint64_t written() const { return written_; }

 private:
  void cleanup() {
    g_temp_live = false;
    std::remove(path_.c_str());
  }
  std::string final_, path_;
  FILE* f_ = nullptr;
  uint64_t written_ = 0;
  bool committed_ = false;
};

class Progress {
 public:
  Progress(bool on, uint64_t total) : on_(on), total_(total), t0_(std::chrono::steady_clock::now()) {}
  void update(uint64_t done) {
    if (!on_) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    const double eta = frac > 0 ? s * (1 - frac) / frac : 0;
    char bar[31];
    const int filled = static_cast<int>(frac * 30);
    for (int i = 0; i < 30; ++i) bar[i] = i < filled ? '#' : '.';
    bar[30] = 0;
    std::fprintf(stderr, "\r[%s] %7.2f / %.2f GiB  ETA %4.0fs ", bar, done / 1073741824.0, total_ / 1073741824.0, eta);
    std::fflush(stderr);
  }
  void done() {
    if (on_) std::fprintf(stderr, "\n");
  }

 private:
  bool on_;
  uint64_t total_;
  std::chrono::steady_clock::time_point t0_;
};

std::string base_name(std::string d) {
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t s = d.rfind('/');
  return s == std::string::npos ? d : d.substr(s + 1);
}

}  // namespace

void remove_temp_on_signal() {
  if (g_temp_live) ::unlink(g_temp_path);
}

Prepared prepare(const Options& o) {
  Prepared p{Checkpoint::open(o.input_dir), {}, {}, {}};
  // llama-quantize's mixes have per-architecture rules (MLA kv_b / k_b / v_b, NextN layers) that tern has not
  // checked against llama.cpp for glm-dsa: refuse rather than write a file that differs from llama.cpp's.
  if (p.ck.hp.glm() && via_llama_quantize(o.type))
    fail("--type %s: not supported for glm-dsa (supported: f32, f16, bf16, q8_0 — the types llama.cpp's converter "
         "writes)", file_type_name(o.type));
  p.plan = make_plan(p.ck, !o.no_mtp);
  p.types = choose_types(p.plan, p.ck.hp, o.type, o.expert_type);
  VocabOptions vo;
  vo.pre = o.vocab_pre;
  p.kv = build_metadata(p.ck, p.plan, o.type, o.name.empty() ? base_name(o.input_dir) : o.name, vo);
  return p;
}

std::string describe_plan(const Prepared& p, const Options& o) {
  std::ostringstream s;
  s << "checkpoint: " << p.ck.dir << " (" << p.ck.files.size() << " safetensors file(s), " << p.ck.tensors.size()
    << " tensors)\n";
  s << "  converted: " << p.plan.n_sources_converted << " source tensors -> " << p.plan.tensors.size()
    << " GGUF tensors (" << p.plan.block_count << " blocks)\n";
  s << "  mtp:       " << p.plan.n_mtp_sources << " source tensors kept as " << p.plan.n_mtp_layers
    << " MTP block(s)\n";
  s << "  skipped:   " << p.plan.n_skipped_mtp << (p.ck.hp.glm() ? " NextN (model.layers.N >= num_hidden_layers)" : " mtp.*")
    << (o.no_mtp ? " (--no-mtp)" : "") << ", " << p.plan.n_skipped_visual << " model.visual.*\n";
  const uint64_t hdr = header_bytes(p).size();
  s << "output size per --type (header " << hdr << " bytes):\n";
  for (FileType ft : {FileType::F32, FileType::F16, FileType::BF16, FileType::Q8_0, FileType::Q4_0, FileType::Q4_1,
                      FileType::Q5_0, FileType::Q5_1, FileType::Q4_K_M, FileType::Q5_K_M, FileType::Q6_K}) {
    if (p.ck.hp.glm() && via_llama_quantize(ft)) continue;  // not offered (prepare)
    const auto types = choose_types(p.plan, p.ck.hp, ft, o.expert_type);
    uint64_t total = hdr;
    for (size_t i = 0; i < types.size(); ++i) total += align_up(tensor_bytes(p.plan.tensors[i], types[i]));
    s << strf("  %-7s %14" PRIu64 " bytes (%.2f GiB)%s\n", file_type_name(ft), total, total / 1073741824.0,
              ft == o.type ? "  <- selected" : "");
  }
  return s.str();
}

Summary run(const Options& o) {
  Prepared p = prepare(o);
  Summary sum;
  sum.n_tensors = p.plan.tensors.size();
  sum.n_sources_converted = p.plan.n_sources_converted;
  sum.n_mtp_sources = p.plan.n_mtp_sources;
  sum.n_mtp_layers = p.plan.n_mtp_layers;
  sum.n_skipped_mtp = p.plan.n_skipped_mtp;
  sum.n_skipped_visual = p.plan.n_skipped_visual;
  if (o.dry_run) {
    std::fputs(describe_plan(p, o).c_str(), stdout);
    return sum;
  }
  log::info("convert: %zu tensors (%zu sources, %zu of them in %lld MTP block(s); skipped %zu mtp, %zu visual) -> %s "
            "as %s", sum.n_tensors, sum.n_sources_converted, sum.n_mtp_sources, static_cast<long long>(sum.n_mtp_layers),
            sum.n_skipped_mtp, sum.n_skipped_visual, o.output.c_str(), file_type_name(o.type));
  const std::vector<uint8_t> head = header_bytes(p);
  uint64_t total = head.size();
  for (size_t i = 0; i < p.types.size(); ++i) total += align_up(tensor_bytes(p.plan.tensors[i], p.types[i]));

  TempOut out(o.output);
  Progress bar(o.progress, total);
  out.write(head.data(), head.size());
  std::vector<float> f;
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < p.plan.tensors.size(); ++i) {
    const OutTensor& t = p.plan.tensors[i];
    materialize(t, p.ck.hp, f);
    encode(p.types[i], f.data(), t.n_elements(), t.ne()[0], bytes);
    out.write(bytes.data(), bytes.size());
    out.pad_to_align();
    bar.update(out.written());
  }
  bar.done();
  if (out.written() != total) fail("internal: wrote %" PRIu64 " bytes, planned %" PRIu64, out.written(), total);
  out.commit();
  sum.bytes_written = total;
  return sum;
}

}  // namespace tern::convert
