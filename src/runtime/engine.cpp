#include "runtime/engine.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "models/registry.h"

namespace tern::runtime {

using models::SequenceState;

namespace {

// Reads weights into the page cache once, in order, with a progress bar on a terminal, so the first tokens do
// not pay a storm of page faults: the whole file when experts are mapped, only the dense tensors when they are
// streamed (the expert pages of the mapping are then never touched). Without a budget, a file larger than half
// the available memory is left to fault in on demand (reading it all would only evict itself).
void warm_pages(const gguf::File& f, const MemoryPlan& plan) {
  const uint64_t total = plan.streamed ? plan.dense : f.file_size();
  if (plan.budget == 0 && static_cast<double>(total) > available_memory_bytes() / 2) {
    log::info("%s: %.1f GiB is more than half the available memory; weights are read on demand", f.name().c_str(),
              total / 1073741824.0);
    return;
  }
  struct Range {
    const uint8_t* p;
    uint64_t n;
  };
  std::vector<Range> ranges;
  if (!plan.streamed) {
    ranges.push_back({f.base(), f.file_size()});
  } else {
    for (const gguf::TensorInfo& t : f.tensors())
      if (t.name.find("_exps.") == std::string_view::npos) ranges.push_back({t.data, t.n_bytes});
  }
  constexpr uint64_t kSlice = uint64_t{64} << 20;
  const uint64_t page = static_cast<uint64_t>(std::max(sysconf(_SC_PAGESIZE), 512L));
  ProgressBar bar("loading");
  uint8_t sink = 0;
  uint64_t done = 0;
  for (const Range& r : ranges) {
    for (uint64_t off = 0; off < r.n; off += kSlice) {
      const uint64_t n = std::min(kSlice, r.n - off);
      const uint8_t* p = r.p + off;
      const uintptr_t aligned = reinterpret_cast<uintptr_t>(p) & ~(page - 1);  // madvise wants a page start
      madvise(reinterpret_cast<void*>(aligned), n + (reinterpret_cast<uintptr_t>(p) - aligned), MADV_WILLNEED);
      for (uint64_t i = 0; i < n; i += page) sink ^= p[i];
      done += n;
      bar.update(std::min(done, total), total);
    }
  }
  asm volatile("" : : "r"(sink));  // keep the reads
}

uint64_t status_kib(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t v = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      v = std::strtoull(line + n + 1, nullptr, 10);
      break;
    }
  std::fclose(f);
  return v;
}

}  // namespace

CheckedOptions check_options(const EngineOptions& o) {
  CheckedOptions c;
  auto type = [](const std::string& s, const char* flag) {
    ops::KvType t;
    if (!ops::parse_kv_type(s.c_str(), &t))
      fail("%s '%s' is not supported (supported: f32, f16, q8_0, q4_0)", flag, s.c_str());
    return t;
  };
  const ops::KvType both = type(o.kv_type, "--kv-type");
  c.kv.k = o.kv_type_k.empty() ? both : type(o.kv_type_k, "--kv-type-k");
  c.kv.v = o.kv_type_v.empty() ? both : type(o.kv_type_v, "--kv-type-v");
  const bool quantized = ops::kv_quantized(c.kv.k) || ops::kv_quantized(c.kv.v);
  if (o.kv_rotate == "auto") c.kv.rotate = quantized;
  else if (o.kv_rotate == "on") c.kv.rotate = true;
  else if (o.kv_rotate == "off") c.kv.rotate = false;
  else fail("--kv-rotate '%s' is not one of auto, on, off", o.kv_rotate.c_str());
  if (o.kv_sink < -1) fail("--kv-sink must be >= 0 (got %lld)", static_cast<long long>(o.kv_sink));
  if (o.kv_window < -1) fail("--kv-window must be >= 0 (got %lld)", static_cast<long long>(o.kv_window));
  c.kv.sink = o.kv_sink >= 0 ? o.kv_sink : quantized ? kDefaultKvSink : 0;
  c.kv.window = o.kv_window >= 0 ? o.kv_window : quantized ? kDefaultKvWindow : 0;
  if (o.n_ctx < 0) fail("-c/--ctx-size must be >= 0 (got %lld)", static_cast<long long>(o.n_ctx));
  if (o.expert_cache < 0) fail("--expert-cache must be >= 0 (got %lld)", static_cast<long long>(o.expert_cache));
  c.budget = o.mem_budget.empty() ? 0 : parse_size(o.mem_budget, "--mem-budget");
  if (!models::parse_mla_form(o.mla_form, &c.mla_form))
    fail("--mla-form must be auto, absorbed or expanded (got '%s')", o.mla_form.c_str());
  if (o.isa != "auto") {
    Isa isa;
    if (!parse_isa(o.isa, &isa)) fail("--isa must be auto, avx512, avx2 or ref (got '%s')", o.isa.c_str());
    c.isa = isa;
  }
  return c;
}

Engine::Engine(const EngineOptions& o) {
  if (o.threads < 0) fail("--threads must be >= 0 (got %d)", o.threads);
  set_n_threads(o.threads);
  const CheckedOptions checked = check_options(o);
  if (checked.isa) set_engine_isa(*checked.isa);  // before the first kernel (the load repacks)
  kv_ = checked.kv;
  if (kv_.k != ops::KvType::kF16 || kv_.v != ops::KvType::kF16 || kv_.rotate)
    log::info("KV cache: %s", kv_description(kv_).c_str());
  const uint64_t budget = checked.budget;
  stats_ = o.stats;

  model_ = models::load_model(o.model_path);
  model_->set_mla_form(checked.mla_form);
  const models::ModelInfo& c = model_->info();
  Comm& comm = world();
  // What this process holds: the whole model, or across ranks its share (state and weights sized by rank_shape).
  std::unique_ptr<models::ModelShape> share;
  if (comm.size() > 1) {
    distribute(comm, o, budget);
    share = model_->rank_shape(comm.size());
  } else if (o.expert_parallel || o.partial_sums) {
    log::info("%s: one process, nothing is split (it applies under mpirun)",
              o.expert_parallel ? "--expert-parallel" : "--partial-sums");
  }
  const models::ModelShape& held = share ? *share : static_cast<const models::ModelShape&>(*model_);
  if (o.n_parallel < 0) fail("--parallel must be >= 1 or auto (got %d)", o.n_parallel);
  const int64_t checkpoints = draft_checkpoints(*model_, o.draft, o.no_spec);
  if (o.n_ctx > 0) {
    n_ctx_ = o.n_ctx;
  } else {
    // --parallel auto: the context first (as for one sequence), then as many sequences as fit.
    n_ctx_ = default_n_ctx(held, kv_, std::max(o.n_parallel, 1), budget);
    log::info("context size %lld (model trained for %lld%s)", static_cast<long long>(n_ctx_),
              static_cast<long long>(c.n_ctx_train),
              n_ctx_ < c.n_ctx_train ? (budget ? ", capped by --mem-budget" : ", capped by available memory") : "");
  }

  if (comm.size() > 1) {
    const int64_t agreed = min_over_ranks(comm, n_ctx_);
    if (agreed != n_ctx_) log::info("context size %lld: the smallest any rank has room for", static_cast<long long>(agreed));
    n_ctx_ = agreed;
  }

  n_parallel_ = o.n_parallel;
  if (n_parallel_ == 0) {
    const AutoParallel a = auto_parallel(held, kv_, n_ctx_, checkpoints, budget);
    n_parallel_ = a.n;
    kv_tokens_ = a.kv_tokens;
    const std::string room = format_bytes(a.room) + (budget ? ", a quarter of --mem-budget" : ", half the available memory");
    if (a.kv_tokens > 0)
      log::info("--parallel auto: %d sequences of up to %lld tokens sharing %lld tokens of KV cache (%s of state "
                "each + %s per token, in %s); requests wait until their tokens fit",
                a.n, static_cast<long long>(n_ctx_), static_cast<long long>(a.kv_tokens), format_bytes(a.fixed).c_str(),
                format_bytes(a.per_token).c_str(), room.c_str());
    else
      log::info("--parallel auto: %d sequence%s of %lld tokens (%s of state each, in %s%s)", a.n, a.n > 1 ? "s" : "",
                static_cast<long long>(n_ctx_), format_bytes(a.per_sequence).c_str(), room.c_str(),
                a.n == kMaxAutoParallel ? strf("; capped at %d", kMaxAutoParallel).c_str() : "");
  }
  MemoryRequest req;
  req.n_ctx = n_ctx_;
  req.n_parallel = n_parallel_;
  req.kv_tokens = kv_tokens_;
  req.kv = kv_;
  req.batch_rows = o.batch_rows;
  req.budget = budget;
  req.expert_slots = o.expert_cache;
  req.prefix_cache = o.prefix_cache_bytes;
  req.repack = !o.no_repack;
  req.checkpoints = checkpoints;
  plan_ = plan_memory(held, req);
  if (req.repack && !plan_.streamed && budget == 0 &&
      static_cast<double>(plan_.dense + plan_.experts) > 0.8 * available_memory_bytes()) {
    log::info("weights stay memory-mapped in the file's layout (not repacked): %s is more than 80%% of the %s "
              "available (--mem-budget streams the experts, repacked as they are read)",
              format_bytes(plan_.dense + plan_.experts).c_str(),
              format_bytes(static_cast<uint64_t>(available_memory_bytes())).c_str());
    req.repack = false;
    plan_ = plan_memory(held, req);
  }
  if (budget > 0 || plan_.streamed) log::info("memory plan:\n%s", format_plan(plan_).c_str());
  else log::info("memory: %s", plan_.verdict.c_str());
  if (!plan_.fits) fail("--mem-budget %s: %s", o.mem_budget.c_str(), plan_.verdict.c_str());
  if (req.repack) repack_weights(plan_.streamed);
  else if (comm.size() == 1) warm_pages(model_->file(), plan_);  // across ranks each reads only its share, on use

  log::info("%s: %s, %s, %d threads, backend %s", o.model_path.c_str(), c.arch.c_str(), c.summary.c_str(),
            n_threads(), model_->backend().name().c_str());
  models::TensorDump dump;
  if (!o.dump_dir.empty()) dump = models::TensorDump(o.dump_dir);
  model_->start(std::move(dump), plan_.streamed ? plan_.slots : 0);

  if (o.draft < -1) fail("--draft must be >= 0 (got %d)", o.draft);
  DraftOptions d;
  d.min_p = o.draft_min_p;
  d.max = o.no_spec ? 0 : (o.draft >= 0 ? o.draft : kDefaultDraft);
  d.adaptive = !o.draft_fixed;
  if (comm.size() > 1) d.comm = &comm;  // the adaptive length follows rank 0's timings on every rank
  if (!model_->can_draft()) {
    if (o.draft > 0) log::warn("--draft %d: %s has no MTP block tern drafts with; decoding one token per forward", o.draft,
                               o.model_path.c_str());
    d.max = 0;
  } else if (d.max > 0) {
    if (d.adaptive)
      log::info("speculative decoding: the MTP block drafts up to %d tokens per step (adaptive; --draft N, --no-spec)",
                d.max);
    else
      log::info("speculative decoding: the MTP block drafts %d tokens every step (--draft-fixed)", d.max);
  } else {
    log::info("speculative decoding: off (%s)", o.no_spec ? "--no-spec" : "--draft 0");
  }
  decoder_ = std::make_unique<DecodeLoop>(*model_, d);
}

// Across ranks: every rank maps the same file (checked: hash of the header and tensor table, and the size) and keeps
// its share of the weights (models/model.h Model::distribute).
void Engine::distribute(Comm& comm, const EngineOptions& o, uint64_t budget) {
  const gguf::File& f = model_->file();
  const uint64_t mine[2] = {fnv1a64(f.base(), static_cast<size_t>(f.data_offset())), f.file_size()};
  std::vector<uint64_t> all(2 * static_cast<size_t>(comm.size()));
  comm.allgather(mine, all.data(), std::vector<size_t>(static_cast<size_t>(comm.size()), sizeof mine));
  for (int r = 1; r < comm.size(); ++r)
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
      fail("rank %d's model file is not rank 0's (header and tensor table hash %016llx, %llu bytes; rank 0: %016llx, "
           "%llu bytes): every rank must map the same GGUF (this rank: %s)", r,
           static_cast<unsigned long long>(all[2 * r]), static_cast<unsigned long long>(all[2 * r + 1]),
           static_cast<unsigned long long>(all[0]), static_cast<unsigned long long>(all[1]), o.model_path.c_str());
  models::SplitOptions split;
  split.whole_experts = o.expert_parallel;
  split.partial_sums = o.partial_sums;
  // With a memory budget the experts may be streamed: each rank then reads its rows of them from the file.
  split.experts_in_file = budget > 0 || o.expert_cache > 0;
  model_->distribute(comm, split);
}

// Matrices into the kernels' layout (streamed experts are repacked as they are read instead); logged once.
void Engine::repack_weights(bool experts_streamed) {
  using models::RepackScope;
  const auto t0 = std::chrono::steady_clock::now();
  repack_ = model_->repack(experts_streamed ? RepackScope::kDense : RepackScope::kAll);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (repack_.matrices > 0) log::info("repacked %lld matrices for the kernels (%s, from %s in the file, whose pages were given back) in %.1f s%s",
            static_cast<long long>(repack_.matrices), format_bytes(repack_.bytes).c_str(),
            format_bytes(repack_.file_bytes).c_str(), s, experts_streamed ? "; streamed experts are repacked as read" : "");
  if (!repack_.kept.empty())
    log::info("kept in the file's layout: %zu matrices (first: %s)", repack_.kept.size(), repack_.kept.front().c_str());
}

Engine::~Engine() {
  if (stats_) print_stats();
}

void Engine::print_stats() const {
  const models::ExpertCacheStats st = model_->expert_stats();
  const ResidentSet rss = resident_set();
  if (model_->experts_streamed()) {
    const uint64_t uses = st.hits + st.misses;
    std::fprintf(stderr,
                 "expert cache: %lld of %lld experts per layer, %llu hits, %llu misses (hit rate %.1f%%), "
                 "%s read, %.3f s waiting on reads\n",
                 static_cast<long long>(model_->expert_slots()), static_cast<long long>(info().n_expert),
                 static_cast<unsigned long long>(st.hits), static_cast<unsigned long long>(st.misses),
                 uses ? 100.0 * static_cast<double>(st.hits) / static_cast<double>(uses) : 0.0,
                 format_bytes(st.bytes_read).c_str(), st.read_seconds);
  } else {
    std::fprintf(stderr, "expert cache: off (experts memory-mapped)\n");
  }
  if (repack_.matrices > 0)
    std::fprintf(stderr, "repacked: %lld matrices, %s (file layout %s; %zu kept in the file layout)\n",
                 static_cast<long long>(repack_.matrices), format_bytes(repack_.bytes).c_str(),
                 format_bytes(repack_.file_bytes).c_str(), repack_.kept.size());
  else
    std::fprintf(stderr, "repacked: none (weights computed from the file's layout)\n");
  const DraftStats& ds = decoder_->stats();
  if (decoder_->drafting())
    std::fprintf(stderr, "speculative decoding: %lld steps, %lld drafted, %lld accepted (acceptance %.1f%%), %.2f tokens per step\n",
                 static_cast<long long>(ds.steps), static_cast<long long>(ds.drafted), static_cast<long long>(ds.accepted),
                 100.0 * ds.acceptance(), ds.tokens_per_step());
  const Comm& comm = world();
  if (comm.size() > 1) {
    const CommStats& cs = comm.stats();
    std::fprintf(stderr, "rank %d of %d: %lld collectives, %s sent, %.3f s in them (%.1f us each, waiting for the "
                 "slowest rank included)\n", comm.rank(), comm.size(), static_cast<long long>(cs.calls),
                 format_bytes(cs.bytes).c_str(), cs.seconds, cs.calls ? 1e6 * cs.seconds / static_cast<double>(cs.calls) : 0.0);
  }
  std::fprintf(stderr, "memory: resident %s now, %s peak; plan %s%s%s\n", format_bytes(rss.now).c_str(),
               format_bytes(rss.peak).c_str(), format_bytes(plan_.total()).c_str(),
               plan_.budget ? ", budget " : "", plan_.budget ? format_bytes(plan_.budget).c_str() : "");
}

ResidentSet resident_set() { return {status_kib("VmRSS") * 1024, status_kib("VmHWM") * 1024}; }

std::unique_ptr<SequenceState> Engine::new_sequence() const {
  return std::make_unique<SequenceState>(model_->backend(), model_->state_shape(), n_ctx_, kv_);
}

const std::vector<float>& Engine::eval(SequenceState& seq, const std::vector<int32_t>& tokens, bool all_logits) {
  std::vector<models::SeqInput> batch(1);
  batch[0].state = &seq;
  batch[0].all_logits = all_logits;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n <= kMaxBatchRows) {
    batch[0].tokens = tokens;
    return model_->forward(batch);
  }
  // Long prompts go in chunks (bounded buffers); every row's result is the same as in one forward.
  const bool bad_token = std::any_of(tokens.begin(), tokens.end(), [&](int32_t t) { return t < 0 || t >= info().n_vocab; });
  if (bad_token || seq.n_past() + n > seq.n_ctx()) {
    batch[0].tokens = tokens;
    return model_->forward(batch);  // refused with the usual error before any state changes
  }
  all_logits_.clear();
  const std::vector<float>* last = nullptr;
  for (int64_t i = 0; i < n; i += kMaxBatchRows) {
    batch[0].tokens.assign(tokens.begin() + i, tokens.begin() + std::min(n, i + kMaxBatchRows));
    last = &model_->forward(batch);
    if (all_logits) all_logits_.insert(all_logits_.end(), last->begin(), last->end());
  }
  return all_logits ? all_logits_ : *last;
}

std::vector<int32_t> parse_token_list(const std::string& s) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ',' || s[i] == ' ')) ++i;
    if (i >= s.size()) break;
    size_t j = i;
    while (j < s.size() && s[j] != ',' && s[j] != ' ') ++j;
    std::string item = s.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (end != item.c_str() + item.size() || errno || v < 0 || v > INT32_MAX)
      fail("--tokens: '%s' is not a token id (expected non-negative integers separated by commas)", item.c_str());
    out.push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (out.empty()) fail("--tokens: no token ids given");
  return out;
}

}  // namespace tern::runtime
