// Tensor/expert-parallel forward across MPI ranks (core/comm.h, Model::distribute). Run by ctest as `mpiexec -np 2`
// and `-np 3` (oversubscribed, loopback) and as one plain process. Every rank loads the fixture twice: split across
// the job's ranks, and whole as one process (a local Comm of one rank); the split forward must give every rank the
// same bits, match the one-process forward, and match transformers / llama.cpp within the fixture's tolerance.
//
// Split vs one process. The default split (heads of both mixers, experts by rows, LM head rows) moves values between
// ranks and never sums them in a new order: the logits must be one process's bits. Expert parallel (whole experts
// per rank, --expert-parallel) sums each layer's FFN output over ranks in rank order instead of in one top-k order
// (the same float terms, associated differently, ~1e-7 relative per layer): every row within 1e-4 * (1 + max|logit|)
// for exact weights; quantized weights have a looser bound (see expect_close). Partial sums (--partial-sums: the out
// projections and downs split by columns, each block's output summed over ranks) split every such dot product into
// per-rank pieces added in rank order: the same tolerances, for the same reason.
//
// Collectives must be called by every rank in the same order: checks here are EXPECTs (no early return) so that a
// failing rank still reaches the next collective; ctest's timeout guards against a hang.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/comm.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/model_refs.h"
#include "runtime/decode_loop.h"
#include "runtime/sampler.h"
#ifdef TERN_MPI
#include "dist/mpi.h"
#endif

namespace fs = std::filesystem;
using namespace tern;
using models::DraftInput;
using models::RepackScope;
using models::SeqInput;
using models::SequenceState;

namespace {

const fs::path kModels = fs::path(TERN_FIXTURES_DIR) / "models";
// The bundled model: 2 KV heads and 2 DeltaNet key heads, so with 2 ranks each takes whole head groups (the fixtures'
// one KV head is shared at 2 ranks, each taking half of its query heads; at 3 ranks their attention runs whole).
const fs::path kBundled = fs::path(TERN_FIXTURES_DIR) / ".." / ".." / "models" / "tern-tiny-q35moe.gguf";

// Whether every rank holds the same bytes.
bool same_on_every_rank(const void* data, size_t n) {
  Comm& c = world();
  const uint64_t h = fnv1a64(data, n);
  std::vector<uint64_t> all(static_cast<size_t>(c.size()));
  c.allgather(&h, all.data(), std::vector<size_t>(all.size(), sizeof h));
  for (uint64_t x : all)
    if (x != all[0]) return false;
  return true;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(double(x)));
  return m;
}

// Rows of [n, V] logits, split (`got`) vs one process (`want`). Exact weights: every row within
// 1e-4 * (1 + max|logit|) and the same top-1. Quantized weights: activations are rounded to 8 bits before each
// matmul, so a 1e-7 change can move an activation by a whole rounding step (measured: router logits 1e-6 apart after
// layer 1, 6e-3 after layer 2), and where two experts' router logits are that close the routing flips and the
// recurrent state carries it to every later row (q35-ratio.q4_0 len63, 3 ranks: gap 8e-3 at token 33 of layer 7,
// mean row max |dlogit| 0.06 of a logit scale of 18): the same top-1 except where the one-process top two are within
// 0.05, and the mean over rows of the row's max |dlogit| within 1e-2 * (1 + max|logit|).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, int64_t V, const std::string& what,
                  bool quantized = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double scale = 1 + max_abs(want), bound = (quantized ? 1e-2 : 1e-4) * scale;
  const int64_t rows = static_cast<int64_t>(want.size()) / V;
  double worst = 0, sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double row = 0, top = -INFINITY, second = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      const double w = want[r * V + v];
      row = std::max(row, std::fabs(double(got[r * V + v]) - w));
      if (w > top) second = top, top = w;
      else second = std::max(second, w);
    }
    worst = std::max(worst, row);
    sum += row;
    if (!quantized || top - second >= 0.05) {
      EXPECT_EQ(runtime::argmax(got.data() + r * V, V), runtime::argmax(want.data() + r * V, V)) << what << " row " << r;
    }
  }
  EXPECT_LE(quantized ? sum / static_cast<double>(rows) : worst, bound) << what;
  if (world().rank() == 0)
    std::printf("[%s] %d ranks vs one process: max |dlogit| %.2e, mean row max %.2e (bound %.2e on the %s)\n",
                what.c_str(), world().size(), worst, sum / static_cast<double>(rows), bound, quantized ? "mean" : "max");
}

struct Pair {
  std::unique_ptr<Comm> local = make_local_comm();
  std::unique_ptr<models::Model> split, whole;
  // slots > 0: the split model streams its routed experts through that many slots per layer, reading its rows of
  // them from the file (SplitOptions::experts_in_file) and repacking them as read; the one-process model maps them,
  // repacked at load (kAll), as streamed experts are (the file-layout kernels may round K-quants differently).
  Pair(const fs::path& file, RepackScope scope, bool whole_experts = false, int64_t slots = 0, bool partial_sums = false) {
    split = models::load_model(file.string());
    whole = models::load_model(file.string());
    models::SplitOptions opt;
    opt.whole_experts = whole_experts;
    opt.partial_sums = partial_sums;
    opt.experts_in_file = slots > 0;
    split->distribute(world(), opt);
    whole->distribute(*local);
    split->repack(scope);
    whole->repack(slots > 0 ? RepackScope::kAll : scope);
    split->start({}, slots);
    whole->start({}, 0);
  }
  std::unique_ptr<SequenceState> state(models::Model& m) const {
    return std::make_unique<SequenceState>(m.backend(), m.state_shape(), 512, ops::KvConfig(ops::KvType::kF32));
  }
};

struct Case {
  std::string preset, file;
  RepackScope scope = RepackScope::kAll;
  std::string quant = "";      // quantized file: its llama.cpp reference's type name
  bool whole_experts = false;  // expert parallel (summed over ranks) instead of experts split by rows (exact)
  bool narrow = false;         // experts too narrow to split by rows: whole experts per rank, as whole_experts
  bool partial_sums = false;   // out projections and downs by columns, summed over ranks (tolerance)
};
Case make(std::string preset, std::string file, RepackScope scope = RepackScope::kAll, std::string quant = "",
          bool whole_experts = false, bool narrow = false, bool partial_sums = false) {
  return {std::move(preset), std::move(file), scope, std::move(quant), whole_experts, narrow, partial_sums};
}
Case partial(Case c) {
  c.partial_sums = true;
  return c;
}
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.file << (c.scope == RepackScope::kAll ? " repacked" : "") << (c.whole_experts ? " expert-parallel" : "")
      << (c.partial_sums ? " partial-sums" : "");
}

class Distributed : public ::testing::TestWithParam<Case> {};

// Teacher-forced logits of every fixture prompt and a greedy continuation: split vs one process vs transformers.
TEST_P(Distributed, MatchesOneProcessAndTransformers) {
  const Case& c = GetParam();
  Pair p(c.preset.empty() ? kBundled : kModels / c.file, c.scope, c.whole_experts, 0, c.partial_sums);
  const int64_t V = p.whole->info().n_vocab;
  auto teacher_forced = [&](models::Model& m, const std::vector<int32_t>& toks) {
    auto st = p.state(m);
    std::vector<SeqInput> b(1);
    b[0] = {st.get(), toks, true};
    return m.forward(b);
  };
  // Prompts: the fixture's (the bundled model has none: a fixed prompt of its vocabulary).
  const fs::path ref = kModels / c.preset / "ref_hf.json";
  std::vector<test::Prompt> prompts;
  if (c.preset.empty()) {
    test::Prompt pr;
    pr.name = "fixed";
    for (int i = 0; i < 40; ++i) pr.tokens.push_back((i * 977 + 13) % static_cast<int32_t>(V));
    prompts.push_back(pr);
  } else {
    prompts = test::read_prompts(ref);
  }
  for (const test::Prompt& pr : prompts) {
    const std::vector<float> got = teacher_forced(*p.split, pr.tokens);
    EXPECT_TRUE(same_on_every_rank(got.data(), got.size() * sizeof(float))) << pr.name << ": ranks' logits differ";
    const std::vector<float> want = teacher_forced(*p.whole, pr.tokens);
    expect_close(got, want, V, c.file + " " + pr.name, !c.quant.empty());
    // Split heads, experts and dense FFNs split by rows move values without summing them: the logits are then one
    // process's bits exactly. Only whole experts per rank (expert parallel) sum a layer's output over ranks, and get
    // the tolerance above.
    if (!(c.whole_experts || c.narrow || c.partial_sums) || (p.whole->info().n_expert == 0 && !c.partial_sums)) {
      EXPECT_EQ(got, want) << c.file << " " << pr.name << ": split vs one process, bit for bit";
    }
  }
  // The fixture's own check of this file: transformers fp32 for exact weights, llama.cpp on the same file when quantized.
  auto split_tf = [&](const std::vector<int32_t>& t) { return teacher_forced(*p.split, t); };
  if (c.preset.empty()) {}  // no reference: the one-process comparison above
  else if (c.quant.empty()) test::expect_logits_match_transformers(split_tf, V, ref);
  else test::expect_logits_match_llamacpp(split_tf, V, kModels / c.preset / ("ref_llamacpp_" + c.quant + ".json"), false,
                                          c.file + " split");

  // Greedy: the same tokens as one process.
  const std::vector<int32_t> prompt = prompts.front().tokens;
  std::vector<int32_t> out[2];
  models::Model* ms[2] = {p.split.get(), p.whole.get()};
  for (int i = 0; i < 2; ++i) {
    auto st = p.state(*ms[i]);
    std::vector<SeqInput> b(1);
    b[0] = {st.get(), prompt, false};
    for (int k = 0; k < 16; ++k) {
      const int32_t t = runtime::argmax(ms[i]->forward(b).data(), V);
      out[i].push_back(t);
      b[0].tokens = {t};
    }
  }
  EXPECT_EQ(out[0], out[1]) << c.file << ": greedy tokens";
}

std::vector<Case> cases() {
  std::vector<Case> cs;
  // Expert parallel: whole experts per rank, outputs summed over ranks (tolerance).
  for (RepackScope s : {RepackScope::kAll, RepackScope::kNone})
    cs.push_back(make("q35-ratio", "q35-ratio.f16.gguf", s, "", true));
  cs.push_back(make("q35-ratio", "q35-ratio.q4_0.gguf", RepackScope::kAll, "q4_0", true));
  cs.push_back(make("q35-mtp", "q35-mtp.bf16.gguf", RepackScope::kAll, "", true));
  // Experts split by rows (the default): bit for bit.
  for (RepackScope s : {RepackScope::kAll, RepackScope::kNone}) {
    cs.push_back(make("q35-ratio", "q35-ratio.f16.gguf", s));
    cs.push_back(make("dense-tiny", "dense-tiny.f16.gguf", s));  // dense FFN, split by rows
  }
  cs.push_back(make("q35-ratio", "q35-ratio.q4_k_m.gguf", RepackScope::kAll, "q4_k_m"));
  cs.push_back(make("q35-ratio", "q35-ratio.q4_0.gguf", RepackScope::kAll, "q4_0"));
  cs.push_back(make("q35-mtp", "q35-mtp.bf16.gguf", RepackScope::kAll));
  cs.push_back(make("next-tiny", "next-tiny.f16.gguf", RepackScope::kAll));
  // The 2.4T shape: 512 experts top-10, one DeltaNet key head (at 2 ranks each takes half of its value heads).
  // Its expert FFN is 1 row wide: the experts cannot split by rows and fall back to whole experts per rank.
  cs.push_back(make("q24t-shape", "q24t-shape.f16.gguf", RepackScope::kAll, "", false, true));  // qwen3next: grouped value heads, fused beta/alpha
  cs.push_back(make("", "tern-tiny-q35moe.gguf", RepackScope::kAll));
  cs.push_back(make("", "tern-tiny-q35moe.gguf", RepackScope::kNone));
  // Partial sums: the out projections and downs by columns, summed over ranks (tolerance).
  for (RepackScope s : {RepackScope::kAll, RepackScope::kNone}) {
    cs.push_back(partial(make("q35-ratio", "q35-ratio.f16.gguf", s)));
    cs.push_back(partial(make("dense-tiny", "dense-tiny.f16.gguf", s)));
  }
  cs.push_back(partial(make("q35-ratio", "q35-ratio.q4_k_m.gguf", RepackScope::kAll, "q4_k_m")));
  cs.push_back(partial(make("q35-ratio", "q35-ratio.q4_0.gguf", RepackScope::kAll, "q4_0")));
  cs.push_back(partial(make("q35-ratio", "q35-ratio.q4_0.gguf", RepackScope::kAll, "q4_0", true)));  // with expert parallel
  cs.push_back(partial(make("next-tiny", "next-tiny.f16.gguf", RepackScope::kAll)));
  cs.push_back(partial(make("", "tern-tiny-q35moe.gguf", RepackScope::kAll)));
  return cs;
}
INSTANTIATE_TEST_SUITE_P(Fixtures, Distributed, ::testing::ValuesIn(cases()));

// Partial sums are there to cut the collectives: one per block instead of two (the gathers of the heads and of the
// output rows, or of the SwiGLU rows and of the output rows, become one sum). Counted on the bundled model for one
// forward of a prompt (its blocks split on its types' blocks at 2 and 3 ranks: asserted by the count).
TEST(DistributedPartialSums, OneCollectivePerBlock) {
  if (world().size() == 1) GTEST_SKIP() << "one rank: nothing is split";
  int64_t calls[2];
  for (int i = 0; i < 2; ++i) {
    Pair p(kBundled, RepackScope::kAll, false, 0, i == 1);
    auto st = p.state(*p.split);
    std::vector<SeqInput> b(1);
    b[0] = {st.get(), {1, 2, 3, 4, 5}, false};
    world().reset_stats();
    p.split->forward(b);
    calls[i] = world().stats().calls;
  }
  const int64_t n_layer = models::load_model(kBundled.string())->info().n_layer;
  // Split heads (2 ranks: both mixers; 3 ranks: neither, they run whole) and experts by rows: 4 or 2 gathers a
  // layer, and the logits' gather; partial sums: half as many a layer.
  const int64_t per_layer_rows = (calls[0] - 1) / n_layer;
  EXPECT_EQ(calls[0], per_layer_rows * n_layer + 1);
  EXPECT_EQ(calls[1], per_layer_rows / 2 * n_layer + 1) << "rows split: " << calls[0] << " collectives";
  if (world().rank() == 0)
    std::printf("[partial sums] %d ranks, %lld layers: %lld collectives a forward (gathers: %lld)\n", world().size(),
                static_cast<long long>(n_layer), static_cast<long long>(calls[1]), static_cast<long long>(calls[0]));
}

// Streaming experts across ranks (--mem-budget under mpirun): each rank reads its rows of each chosen expert from the
// file into a small cache (repacked as read) instead of holding its rows of every expert. Rows split: one process's
// logits bit for bit at any cache size; whole experts per rank: the expert-parallel tolerance.
TEST(DistributedStreaming, ExpertsReadFromTheFileMatchOneProcess) {
  for (const char* f : {"q35-ratio.f16.gguf", "q35-ratio.q4_0.gguf", "q35-ratio.q4_k_m.gguf"})
    for (int64_t slots : {1, 3})
      for (bool whole_experts : {false, true}) {
        Pair p(kModels / f, RepackScope::kDense, whole_experts, slots);
        ASSERT_TRUE(p.split->experts_streamed());
        const int64_t V = p.whole->info().n_vocab;
        const std::vector<int32_t> toks = test::read_prompts(kModels / "q35-ratio" / "ref_hf.json").back().tokens;
        std::vector<float> lg[2];
        models::Model* ms[2] = {p.split.get(), p.whole.get()};
        for (int i = 0; i < 2; ++i) {
          auto st = p.state(*ms[i]);
          std::vector<SeqInput> b(1);
          b[0] = {st.get(), toks, true};
          lg[i] = ms[i]->forward(b);
        }
        const std::string what = std::string(f) + " slots " + std::to_string(slots) + (whole_experts ? " expert-parallel" : "");
        EXPECT_TRUE(same_on_every_rank(lg[0].data(), lg[0].size() * sizeof(float))) << what;
        if (whole_experts) expect_close(lg[0], lg[1], V, what, std::string(f).find(".f16") == std::string::npos);
        else EXPECT_EQ(lg[0], lg[1]) << what << ": streamed across ranks vs one process, bit for bit";
        EXPECT_GT(p.split->expert_stats().misses, 0u) << what << ": experts were read";
      }
}

// The MTP block's draft forward (its own MoE layer and head, split too) against one process.
TEST(DistributedDraft, MtpRowsMatchOneProcess) {
  Pair p(kModels / "q35-mtp.bf16.gguf", RepackScope::kAll);
  ASSERT_TRUE(p.split->can_draft());
  const int64_t V = p.whole->info().n_vocab, D = p.whole->info().n_embd;
  const std::vector<int32_t> toks = test::read_prompts(kModels / "q35-mtp" / "ref_hf.json").back().tokens;  // longest
  std::vector<float> draft[2];
  models::Model* ms[2] = {p.split.get(), p.whole.get()};
  for (int i = 0; i < 2; ++i) {
    auto st = p.state(*ms[i]);
    std::vector<SeqInput> b(1);
    b[0] = {st.get(), toks, false};
    b[0].hidden = true;
    ms[i]->forward(b);
    const std::vector<float> h = ms[i]->hidden();
    std::vector<DraftInput> d(1);
    d[0].state = st.get();
    d[0].tokens.assign(toks.begin() + 1, toks.end());
    d[0].hidden.assign(h.begin(), h.end() - D);
    d[0].all_logits = true;
    draft[i] = ms[i]->forward_draft(d);
  }
  EXPECT_TRUE(same_on_every_rank(draft[0].data(), draft[0].size() * sizeof(float)));
  expect_close(draft[0], draft[1], V, "q35-mtp draft rows");
  EXPECT_EQ(draft[0], draft[1]) << "draft rows, experts split by rows: bit for bit";
}

// Sampling from each rank's share of a row (runtime::LogitsRow) against sampling the whole row: the same token on
// every rank, draw after draw (the same generator steps), for greedy, penalties, top-k / top-p / min-p, top-k off
// (the row is gathered), ties across ranks and NaN logits. One process: the shares are the whole row (trivially).
TEST(DistributedSampling, SharesGiveTheWholeRowsToken) {
  Comm& c = world();
  const int64_t V = 1003;  // shares as the LM head's: multiples of 8, the last rank takes the rest
  const Split split{V, 8, c.size()};
  const int64_t first = split.begin(c.rank()), count = split.size(c.rank());
  runtime::SamplingParams greedy;
  greedy.temperature = 0;
  runtime::SamplingParams greedy_pen = greedy;
  greedy_pen.repeat_penalty = 1.3f;
  greedy_pen.presence_penalty = -0.4f;  // raises the logits of recent tokens
  runtime::SamplingParams dflt;  // temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
  runtime::SamplingParams hot = dflt;
  hot.temperature = 1.7f, hot.top_k = 7, hot.top_p = 1.0f, hot.min_p = 0.0f, hot.frequency_penalty = 0.5f;
  hot.penalty_last_n = -1;
  runtime::SamplingParams no_top_k = dflt;
  no_top_k.top_k = 0, no_top_k.top_p = 0.9f;
  runtime::SamplingParams wide_k = dflt;
  wide_k.top_k = 400;  // R x 400 candidates cost more than the row: gathered
  int which = 0;
  for (const runtime::SamplingParams& sp : {greedy, greedy_pen, dflt, hot, no_top_k, wide_k}) {
    ++which;
    runtime::Sampler whole(sp), shared(sp);
    std::vector<float> row(static_cast<size_t>(V));
    for (int draw = 0; draw < 120; ++draw) {
      // Coarse values (many exact ties, some across ranks), a peaked row now and then, NaNs in some rows.
      for (int64_t i = 0; i < V; ++i) {
        const float x = std::sin(0.731f * static_cast<float>(i * (draw + 3)) + static_cast<float>(draw));
        row[static_cast<size_t>(i)] = std::round(x * (draw % 3 == 0 ? 40.0f : 6.0f)) / 4.0f;
      }
      if (draw % 5 == 1) row[static_cast<size_t>((draw * 131) % V)] = NAN, row[0] = NAN;
      const int32_t want = whole.sample(row.data(), V);
      const int32_t got = shared.sample(runtime::LogitsRow{row.data() + first, V, first, count, &c});
      EXPECT_EQ(got, want) << "params " << which << " draw " << draw << " rank " << c.rank();
      whole.accept(want);
      shared.accept(got);
      float v_whole = 0, v_shared = 0;
      const int32_t a = runtime::argmax(runtime::LogitsRow::whole(row.data(), V), &v_whole);
      const runtime::LogitsRow share{row.data() + first, V, first, count, &c};
      EXPECT_EQ(runtime::argmax(share, &v_shared), a) << "draw " << draw;
      EXPECT_EQ(v_shared, v_whole);
      const double p_whole = runtime::top_prob(runtime::LogitsRow::whole(row.data(), V), v_whole);
      const double p_shared = runtime::top_prob(share, v_shared);
      if (!std::isnan(p_whole)) {
        EXPECT_NEAR(p_shared, p_whole, 1e-12 * p_whole) << "draw " << draw;
      }
    }
  }
  // Every logit NaN: the same error on every rank (the whole row's), never a hang.
  std::vector<float> nan_row(static_cast<size_t>(V), NAN);
  runtime::Sampler s(dflt);
  EXPECT_THROW(s.sample(runtime::LogitsRow{nan_row.data() + first, V, first, count, &c}), Error);
  EXPECT_EQ(runtime::argmax(runtime::LogitsRow{nan_row.data() + first, V, first, count, &c}), 0);
}

// The decode loop across ranks: each rank's forward returns its own vocabulary columns and picks reduce candidates
// (no gather of the rows): the same greedy and seeded-sampled tokens as one process, drafting or not, and a decode
// step sends fewer bytes than the logits row alone.
TEST(DistributedSampling, DecodeLoopMatchesOneProcessWithoutGatheringRows) {
  Pair p(kModels / "q35-mtp.bf16.gguf", RepackScope::kAll);
  const int64_t V = p.whole->info().n_vocab;
  const std::vector<int32_t> prompt = test::read_prompts(kModels / "q35-mtp" / "ref_hf.json").front().tokens;
  int64_t drafted = 0;  // by the last adaptive loop across ranks
  auto generate = [&](models::Model& m, int draft, bool sampled, CommStats* step_cost, bool adaptive = false) {
    runtime::DraftOptions o;
    o.max = draft;
    o.adaptive = adaptive;
    // Adaptive across ranks: rank 0's measured costs choose the length on every rank.
    if (&m == p.split.get()) o.comm = &world();
    runtime::DecodeLoop loop(m, o);
    auto st = p.state(m);
    runtime::SamplingParams sp;
    if (!sampled) sp.temperature = 0;
    runtime::Sampler smp(sp);
    for (int32_t t : prompt) smp.accept(t);
    runtime::DecodeSeq ds;
    ds.state = st.get();
    ds.feed = prompt;
    ds.sample = true;
    std::vector<runtime::DecodeSeq*> one = {&ds};
    std::vector<int32_t> out;
    auto pick = [&](size_t, const runtime::LogitsRow& row, int32_t) {
      const int32_t t = smp.sample(row);
      smp.accept(t);
      out.push_back(t);
      if (out.size() >= 24) ds.stopped = true;
      return t;
    };
    while (out.size() < 24) {
      const CommStats before = world().stats();
      loop.step(one, pick);
      if (step_cost && out.size() > 1 && step_cost->calls == 0) {  // one decode step (not the prompt's)
        step_cost->calls = world().stats().calls - before.calls;
        step_cost->bytes = world().stats().bytes - before.bytes;
      }
      ds.feed = {out.back()};
    }
    out.resize(24);
    drafted = loop.stats().drafted;
    return out;
  };
  // Bytes one forward of one token sends with the rows gathered (what each step cost before).
  uint64_t gathered_step = 0;
  {
    auto st = p.state(*p.split);
    std::vector<SeqInput> b(1);
    b[0] = {st.get(), {prompt[0]}, false};
    const uint64_t before = world().stats().bytes;
    p.split->forward(b);
    gathered_step = world().stats().bytes - before;
  }
  // The adaptive length across ranks: the same forwards on every rank (else the collectives would not match), the
  // tokens one process gives. Three prompts' worth of steps so that it measures, probes and chooses.
  for (bool sampled : {false, true}) {
    const std::vector<int32_t> want = generate(*p.whole, 3, sampled, nullptr);
    for (int rep = 0; rep < 3; ++rep) {
      const std::vector<int32_t> got = generate(*p.split, 3, sampled, nullptr, true);
      EXPECT_EQ(got, want) << "adaptive, sampled " << sampled;
      EXPECT_TRUE(same_on_every_rank(&drafted, sizeof drafted)) << "ranks drafted differently";
      if (world().rank() == 0 && rep == 0) std::printf("[adaptive across %d ranks, sampled %d] %lld tokens drafted\n", world().size(), sampled, static_cast<long long>(drafted));
    }
  }
  for (int draft : {0, 2})
    for (bool sampled : {false, true}) {
      CommStats cost;
      const std::vector<int32_t> got = generate(*p.split, draft, sampled, draft == 0 ? &cost : nullptr);
      EXPECT_TRUE(same_on_every_rank(got.data(), got.size() * sizeof(int32_t)));
      EXPECT_EQ(got, generate(*p.whole, draft, sampled, nullptr)) << "draft " << draft << " sampled " << sampled;
      if (draft == 0 && world().size() > 1) {
        // One decode step: the layers' gathers plus a few candidates instead of this rank's logits columns.
        const uint64_t share = static_cast<uint64_t>(V / world().size()) * sizeof(float);
        EXPECT_LE(cost.bytes + share / 2, gathered_step) << "sampled " << sampled;
        if (world().rank() == 0)
          std::printf("[decode step, %d ranks, %s] %lld collectives, %llu bytes sent by rank 0 (gathering the row: "
                      "%llu)\n", world().size(), sampled ? "sampled" : "greedy", static_cast<long long>(cost.calls),
                      static_cast<unsigned long long>(cost.bytes), static_cast<unsigned long long>(gathered_step));
      }
    }
}

// The cross-rank sum: every rank gets the same bits, the rank-ordered sum.
TEST(Comm, SumOverRanksIsRankOrderedAndIdentical) {
  Comm& c = world();
  const int64_t n = 1000;
  auto value = [](int r, int64_t i) { return std::sin(0.37f * static_cast<float>(i) + static_cast<float>(r)) * (r + 1.5f); };
  std::vector<float> x(n), scratch;
  for (int64_t i = 0; i < n; ++i) x[i] = value(c.rank(), i);
  sum_over_ranks(c, x.data(), n, scratch);
  for (int64_t i = 0; i < n; ++i) {
    float want = value(0, i);
    for (int r = 1; r < c.size(); ++r) want += value(r, i);
    EXPECT_EQ(x[i], want) << i;
  }
  EXPECT_TRUE(same_on_every_rank(x.data(), x.size() * sizeof(float)));
}

TEST(Comm, UnequalAllgatherAndMin) {
  Comm& c = world();
  std::vector<size_t> bytes;
  size_t total = 0;
  for (int r = 0; r < c.size(); ++r) bytes.push_back(4 * static_cast<size_t>(r + 1)), total += bytes.back();
  std::vector<int32_t> mine(static_cast<size_t>(c.rank() + 1), c.rank() * 10);
  std::vector<int32_t> all(total / 4);
  c.allgather(mine.data(), all.data(), bytes);
  size_t k = 0;
  for (int r = 0; r < c.size(); ++r)
    for (int j = 0; j <= r; ++j) EXPECT_EQ(all[k++], r * 10);
  EXPECT_EQ(min_over_ranks(c, 100 - c.rank()), 101 - c.size());
}

}  // namespace

int main(int argc, char** argv) {
#ifdef TERN_MPI
  if (dist::launched_by_mpi()) dist::init_world(&argc, &argv);
#endif
  ::testing::InitGoogleTest(&argc, argv);
  if (world().rank() != 0) {  // one report: rank 0's (a failure on another rank still fails the job's exit status)
    auto& ls = ::testing::UnitTest::GetInstance()->listeners();
    delete ls.Release(ls.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  std::printf("rank %d of %d: %s\n", world().rank(), world().size(), rc ? "FAILED" : "passed");
  return rc;
}
