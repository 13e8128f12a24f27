#include "runtime/memory_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#include "core/error.h"

namespace tern::runtime {

using models::SequenceState;

namespace {

// The program's own resident set before any model (code, libstdc++, the thread pool's stacks: ~8 MiB measured
// for a Release build) plus the parsed metadata, whose vocabulary becomes strings, maps and the tokenizer's
// tables at a few times its size in the file.
constexpr uint64_t kProgramBytes = uint64_t{8} << 20;
constexpr uint64_t kMetadataFactor = 6;

}  // namespace

double available_memory_bytes() {
  // The kernel's MemAvailable counts the page cache it can drop (a model file read a moment ago is mostly cache);
  // sysconf's free pages do not, and after reading a large file they left a model "too big" to repack.
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    std::fclose(f);
    if (found && kb > 0) return static_cast<double>(kb) * 1024.0;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * page : 4e9;
}

int64_t default_n_ctx(const models::ModelShape& m, const ops::KvConfig& kv, int n_parallel, uint64_t budget) {
  const double room = budget ? static_cast<double>(budget) / 4 : available_memory_bytes() / 2;
  const models::StateShape shape = m.state_shape();
  auto state = [&](int64_t n) { return static_cast<double>(SequenceState::bytes_for(shape, n, kv)) * n_parallel; };
  int64_t n = m.info().n_ctx_train;
  while (n > 256 && state(n) > room) n /= 2;
  return n;
}

AutoParallel auto_parallel(const models::ModelShape& m, const ops::KvConfig& kv, int64_t n_ctx, int64_t checkpoints,
                           uint64_t budget) {
  AutoParallel a;
  const double space = budget ? static_cast<double>(budget) / 4 : available_memory_bytes() / 2;
  a.room = static_cast<uint64_t>(space);
  const models::StateShape shape = m.state_shape();
  a.per_token = SequenceState::token_bytes(shape, kv);
  a.fixed = SequenceState::fixed_bytes(shape, kv);
  for (const models::LayerStateShape& s : shape)
    a.fixed += static_cast<uint64_t>(checkpoints * (s.conv_floats + s.ssm_floats)) * sizeof(float);
  a.per_sequence = a.fixed + static_cast<uint64_t>(n_ctx) * a.per_token;
  const double whole = std::floor(space / static_cast<double>(std::max<uint64_t>(a.per_sequence, 1)));
  a.n = static_cast<int>(std::clamp(whole, 1.0, static_cast<double>(kMaxAutoParallel)));
  if (a.n == kMaxAutoParallel || a.per_token == 0) return a;
  // Fewer than the cap fit whole: more sequences share the KV rows left beside their recurrent states, as many as
  // keep at least the rows the whole-context sequences would hold (never fewer tokens in flight than without
  // sharing, and always at least one whole context).
  const int64_t floor_rows = static_cast<int64_t>(a.n) * n_ctx;
  for (int k = kMaxAutoParallel; k > a.n; --k) {
    const double left = space - static_cast<double>(k) * static_cast<double>(a.fixed);
    if (left <= 0) continue;
    const int64_t rows = static_cast<int64_t>(std::floor(left / static_cast<double>(a.per_token)));
    if (rows < floor_rows) continue;
    a.n = k;
    a.kv_tokens = rows < static_cast<int64_t>(k) * n_ctx ? rows : 0;
    break;
  }
  return a;
}

int64_t draft_checkpoints(const models::ModelShape& m, int draft, bool no_spec) {
  if (no_spec || !m.info().mtp_drafts) return 0;
  const int d = draft >= 0 ? draft : kDefaultDraft;
  return d > 0 ? d + 1 : 0;
}

std::string kv_description(const ops::KvConfig& kv) {
  std::string s = kv.k == kv.v ? ops::kv_type_name(kv.k)
                               : std::string("K ") + ops::kv_type_name(kv.k) + " / V " + ops::kv_type_name(kv.v);
  if (kv.rotate) s += ", rotated";
  if (kv.shadow_k() || kv.shadow_v())
    s += ", sink " + std::to_string(kv.sink) + " + window " + std::to_string(kv.window) + " in f16";
  return s;
}

uint64_t MemoryPlan::minimum() const {
  uint64_t one_each = 0;
  for (uint64_t b : expert_bytes) one_each += b;
  return dense + state + buffers + runtime + prefix_cache + one_each;
}

MemoryPlan plan_memory(const models::ModelShape& m, const MemoryRequest& r) {
  const gguf::File& f = m.file();
  const int64_t n_expert = m.info().n_expert;
  MemoryPlan p;
  p.file_bytes = f.file_size();
  p.n_expert = n_expert;
  p.budget = r.budget;
  const models::WeightBytes w = m.weight_bytes(r.repack, true);
  p.dense = w.dense;
  p.experts = w.experts;
  p.expert_bytes = w.expert_bytes;
  p.repacked = w.repacked;
  p.mtp = w.mtp;
  p.state = static_cast<uint64_t>(r.n_parallel) * SequenceState::bytes_for(m.state_shape(), r.n_ctx, r.kv);
  if (r.kv_tokens > 0) {  // the sequences share kv_tokens rows: their recurrent state each, the rows once
    const models::StateShape shape = m.state_shape();
    const uint64_t per_token = SequenceState::token_bytes(shape, r.kv);
    const uint64_t fixed = SequenceState::fixed_bytes(shape, r.kv);
    p.state = static_cast<uint64_t>(r.n_parallel) * fixed + static_cast<uint64_t>(r.kv_tokens) * per_token;
  }
  for (const models::LayerStateShape& s : m.state_shape())
    p.checkpoints += static_cast<uint64_t>(r.checkpoints * (s.conv_floats + s.ssm_floats)) * sizeof(float);
  p.checkpoints *= static_cast<uint64_t>(r.n_parallel);
  p.state += p.checkpoints;
  p.buffers = m.buffer_bytes(std::min(r.batch_rows, r.n_ctx * r.n_parallel), r.n_parallel);
  p.runtime = kProgramBytes + kMetadataFactor * f.data_offset();
  p.prefix_cache = r.prefix_cache;

  uint64_t per_slot = 0;
  for (uint64_t b : p.expert_bytes) per_slot += b;
  if (r.expert_slots > 0) {
    if (r.expert_slots > n_expert)
      fail("--expert-cache %lld: the model has %lld experts per layer", static_cast<long long>(r.expert_slots),
           static_cast<long long>(n_expert));
    p.streamed = true;
    p.slots = r.expert_slots;
  } else if (r.budget > 0) {
    const uint64_t fixed = p.dense + p.state + p.buffers + p.runtime + p.prefix_cache;
    const uint64_t left = r.budget > fixed ? r.budget - fixed : 0;
    if (fixed + p.experts <= r.budget) {
      p.streamed = false;  // everything fits: keep the experts mapped
    } else {
      p.streamed = true;
      p.slots = per_slot ? static_cast<int64_t>(std::min<uint64_t>(left / per_slot, n_expert)) : n_expert;
    }
  }
  p.expert_cache = static_cast<uint64_t>(p.slots) * per_slot;

  char line[256];
  if (r.budget > 0 && (p.total() > r.budget || (p.streamed && p.slots < 1))) {
    p.fits = false;
    std::snprintf(line, sizeof line,
                  "does not fit: the budget %s is below the %s needed for the dense weights, state, buffers and "
                  "one expert per layer",
                  format_bytes(r.budget).c_str(), format_bytes(p.minimum()).c_str());
  } else if (p.streamed) {
    std::snprintf(line, sizeof line, "experts streamed: a cache of %lld of %lld experts per layer (%.0f%% of expert bytes)",
                  static_cast<long long>(p.slots), static_cast<long long>(n_expert),
                  100.0 * static_cast<double>(p.slots) / static_cast<double>(n_expert));
  } else {
    std::snprintf(line, sizeof line, "%s%s", r.budget > 0 ? "fits: all weights in memory" : "no budget: all weights in memory",
                  p.repacked ? " (matrices repacked for the kernels, the rest memory-mapped)"
                             : ", memory-mapped (the page cache decides)");
  }
  p.verdict = line;
  return p;
}

std::string format_bytes(uint64_t b) {
  char s[32];
  const double x = static_cast<double>(b);
  if (x >= 1073741824.0) std::snprintf(s, sizeof s, "%.2f GiB", x / 1073741824.0);
  else if (x >= 1048576.0) std::snprintf(s, sizeof s, "%.1f MiB", x / 1048576.0);
  else std::snprintf(s, sizeof s, "%.1f KiB", x / 1024.0);
  return s;
}

std::string format_plan(const MemoryPlan& p) {
  std::string out;
  auto row = [&](const char* what, uint64_t bytes, const std::string& note) {
    char s[256];
    std::snprintf(s, sizeof s, "  %-16s %12s  %s\n", what, format_bytes(bytes).c_str(), note.c_str());
    out += s;
  };
  row("dense weights", p.dense, p.repacked ? "repacked for the kernels, read every token" : "mapped, read every token");
  if (p.n_expert > 0) row("routed experts", p.experts,
      p.streamed ? "in the file, read on demand" : p.repacked ? "repacked for the kernels" : "mapped");
  if (p.streamed) {
    char note[96];
    std::snprintf(note, sizeof note, "%lld of %lld experts per layer, LRU%s", static_cast<long long>(p.slots),
                  static_cast<long long>(p.n_expert), p.repacked ? ", repacked as read" : "");
    row("expert cache", p.expert_cache, note);
  }
  if (p.mtp) row("  of which MTP", p.mtp, "the draft block (one layer; in the rows above)");
  row("sequence state", p.state,
      p.checkpoints ? "KV cache + recurrent state + " + format_bytes(p.checkpoints) + " of draft checkpoints"
                    : std::string("KV cache + recurrent state"));
  row("buffers", p.buffers, "forward scratch, logits");
  row("runtime", p.runtime, "program, metadata, tokenizer (estimate)");
  if (p.prefix_cache) row("prefix cache", p.prefix_cache, "server snapshots (at most)");
  row("total", p.total(), p.budget ? "budget " + format_bytes(p.budget) : std::string("no budget"));
  out += "  " + p.verdict + "\n";
  return out;
}

uint64_t parse_size(const std::string& text, const char* flag) {
  const char* s = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  std::string unit(end);
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();
  double scale = 0;
  if (unit.empty()) scale = 1;
  else if (unit == "K") scale = 1024.0;
  else if (unit == "M") scale = 1048576.0;
  else if (unit == "G") scale = 1073741824.0;
  else if (unit == "T") scale = 1099511627776.0;
  if (end == s || scale == 0 || !std::isfinite(v) || v <= 0 || v * scale >= 1.8e19)
    fail("%s: '%s' is not a size (expected a positive number with an optional unit K, M, G or T, e.g. 12G)", flag,
         text.c_str());
  return static_cast<uint64_t>(v * scale);
}

}  // namespace tern::runtime
