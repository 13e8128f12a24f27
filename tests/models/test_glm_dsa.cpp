// GLM-5 (glm-dsa: MLA + the sparse-attention indexer + sigmoid-routed MoE) vs references: transformers fp32
// (ref_hf.json, GlmMoeDsaForCausalLM's own forward) and llama.cpp on the same GGUF, on the random-weight fixtures of
// tools/make_glm_fixtures.py: glm5-toy (every layer its own indexer) and glm52-toy (GLM-5.2's full / shared indexer
// layers), with index_topk small so long prompts drop keys. Plus the state properties a server relies on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "model_refs.h"
#include "models/glm_dsa/model.h"
#include "quant/convert.h"
#include "models/registry.h"
#include "models/sequence_state.h"
#include "runtime/sampler.h"

namespace fs = std::filesystem;
using namespace tern;
using models::Model;
using models::RepackScope;
using models::SeqInput;
using models::SequenceState;
using nlohmann::json;

namespace {

const fs::path kModels = fs::path(TERN_FIXTURES_DIR) / "models";

struct Case {
  std::string preset, type;
  bool repack = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.preset << "." << c.type << (c.repack ? " repacked" : ""); }

std::vector<Case> glm_cases() {
  std::vector<Case> cs;
  if (!fs::exists(kModels)) return cs;
  for (const auto& e : fs::directory_iterator(kModels)) {
    if (e.path().extension() != ".gguf") continue;
    if (gguf::File::open(e.path().string()).get_str("general.architecture") != "glm-dsa") continue;
    const std::string stem = e.path().stem().string();
    const size_t dot = stem.rfind('.');
    const std::string type = stem.substr(dot + 1);
    cs.push_back({stem.substr(0, dot), type, false});
    if (type != "f32" && type != "f16" && type != "bf16") cs.push_back({stem.substr(0, dot), type, true});
  }
  std::sort(cs.begin(), cs.end(), [](const Case& a, const Case& b) {
    return std::tie(a.preset, a.type, a.repack) < std::tie(b.preset, b.type, b.repack);
  });
  return cs;
}

std::unique_ptr<Model> load(const fs::path& gguf, bool repack, models::MlaForm form = models::MlaForm::kAuto) {
  auto m = models::load_model(gguf.string());
  dynamic_cast<models::glm_dsa::LoadedModel&>(*m).set_mla_form(form);
  if (repack) m->repack(RepackScope::kAll);
  m->start({}, 0);
  return m;
}

std::vector<float> teacher_forced(Model& m, const std::vector<int32_t>& tokens, ops::KvType kv = ops::KvType::kF32) {
  SequenceState st(m.backend(), m.state_shape(), 512, kv);
  std::vector<SeqInput> b(1);
  b[0].state = &st;
  b[0].tokens = tokens;
  b[0].all_logits = true;
  return m.forward(b);
}

std::vector<int32_t> greedy(Model& m, const std::vector<int32_t>& prompt, int n_new) {
  SequenceState st(m.backend(), m.state_shape(), 512, ops::KvType::kF32);
  std::vector<SeqInput> b(1);
  b[0].state = &st;
  b[0].tokens = prompt;
  std::vector<int32_t> out;
  for (int i = 0; i < n_new; ++i) {
    const auto& lg = m.forward(b);
    const int32_t t = runtime::argmax(lg.data(), m.info().n_vocab);
    out.push_back(t);
    b[0].tokens = {t};
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return a.size() == b.size() ? d : INFINITY;
}

// The longest prompt of a reference (the one whose later rows select fewer keys than they could).
std::vector<int32_t> longest_prompt(const fs::path& ref) {
  std::vector<int32_t> best;
  for (const auto& p : test::read_prompts(ref))
    if (p.tokens.size() > best.size()) best = p.tokens;
  return best;
}

class GlmFixture : public ::testing::TestWithParam<Case> {
 protected:
  fs::path gguf() const { return kModels / (GetParam().preset + "." + GetParam().type + ".gguf"); }
  fs::path dir() const { return kModels / GetParam().preset; }
  bool exact_weights() const { return GetParam().type == "f32" || GetParam().type == "f16" || GetParam().type == "bf16"; }
  std::unique_ptr<Model> model(models::MlaForm form = models::MlaForm::kAuto) const {
    return load(gguf(), GetParam().repack, form);
  }
};

TEST_P(GlmFixture, MatchesTransformers) {
  if (!exact_weights()) GTEST_SKIP() << "quantized weights: compared with llama.cpp, not transformers";
  auto m = model();
  test::expect_logits_match_transformers([&](const std::vector<int32_t>& t) { return teacher_forced(*m, t); },
                                         m->info().n_vocab, dir() / "ref_hf.json");
}

// The plain (expanded) MLA form forced wherever a segment attends every key (the prompts up to index_topk; longer
// ones select keys and run absorbed): the same transformers tolerance as the default.
TEST_P(GlmFixture, ExpandedFormMatchesTransformers) {
  if (!exact_weights()) GTEST_SKIP() << "quantized weights: compared with llama.cpp, not transformers";
  auto m = model(models::MlaForm::kExpanded);
  test::expect_logits_match_transformers([&](const std::vector<int32_t>& t) { return teacher_forced(*m, t); },
                                         m->info().n_vocab, dir() / "ref_hf.json");
}

// Both MLA forms on the same tokens: a prompt up to index_topk fed as a prefill, a second prefill over the first one's
// rows (the expanded form expands the past rows again) and single tokens, until the indexer starts selecting;
// every row's logits. The forms compute the same attention in another fp32 order (absorbed: W_UK^T q and W_UV o per
// head; expanded: W_UK c and W_UV c per key); the fixtures' attn_k_b / attn_v_b are F16 in every file, so the key
// expansion's weights are exact copies. Measured: <= 4.2e-6 of a logit range ~16 (the quantized files 0: their int8
// activations round the differences away). 1e-4 of the range still fails on a wrong transposition, head group or
// past-row expansion (the logits move by O(1)).
TEST_P(GlmFixture, AbsorbedAndExpandedFormsAgree) {
  auto ab = model(models::MlaForm::kAbsorbed), ex = model(models::MlaForm::kExpanded);
  const std::vector<int32_t> p = longest_prompt(dir() / "ref_hf.json");
  const int64_t V = ab->info().n_vocab;
  auto run = [&](Model& m) {
    SequenceState st(m.backend(), m.state_shape(), 512, ops::KvType::kF32);
    std::vector<SeqInput> b(1);
    b[0].state = &st;
    b[0].all_logits = true;
    std::vector<float> all;
    size_t i = 0;
    for (size_t n : {size_t(6), size_t(7), size_t(1), size_t(1), size_t(1)}) {
      b[0].tokens.assign(p.begin() + i, p.begin() + i + n);
      const auto& lg = m.forward(b);
      all.insert(all.end(), lg.begin(), lg.end());
      i += n;
    }
    return all;
  };
  const std::vector<float> a = run(*ab), e = run(*ex);
  ASSERT_EQ(a.size(), e.size());
  double range = 0;
  for (float x : a) range = std::max(range, double(std::fabs(x)));
  EXPECT_LE(max_abs_diff(a, e), 1e-4 * range);
  int agree = 0;
  for (size_t t = 0; t < a.size() / V; ++t) agree += runtime::argmax(a.data() + t * V, V) == runtime::argmax(e.data() + t * V, V);
  EXPECT_EQ(agree, static_cast<int>(a.size() / V));
}

// The memory planner's forward-buffer figure bounds the scratch a forward grows, with either MLA form (the expanded
// one over the longest dense segment, index_topk rows).
TEST_P(GlmFixture, BufferBytesBoundTheScratch) {
  const std::vector<int32_t> p = longest_prompt(dir() / "ref_hf.json");
  for (const models::MlaForm form : {models::MlaForm::kAbsorbed, models::MlaForm::kExpanded}) {
    auto m = model(form);
    teacher_forced(*m, p);
    teacher_forced(*m, std::vector<int32_t>(p.begin(), p.begin() + 16));  // dense: expanded when forced
    EXPECT_LE(m->backend().live_bytes(backend::BufferKind::kScratch),
              m->buffer_bytes(static_cast<int64_t>(p.size()), 1))
        << models::mla_form_name(form);
  }
}

TEST_P(GlmFixture, GreedyMatchesTransformers) {
  if (!exact_weights()) GTEST_SKIP() << "quantized weights: compared with llama.cpp, not transformers";
  auto m = model();
  const json ref = test::read_json(dir() / "ref_hf.json");
  std::map<std::string, std::vector<int32_t>> prompts;
  for (const auto& p : ref["prompts"]) prompts[p["name"]] = p["tokens"].get<std::vector<int32_t>>();
  ASSERT_FALSE(ref["greedy"].empty());
  for (const auto& g : ref["greedy"]) {
    const std::vector<int32_t> want = g["tokens"].get<std::vector<int32_t>>();
    EXPECT_EQ(greedy(*m, prompts.at(g["prompt"]), static_cast<int>(want.size())), want) << "prompt " << g["prompt"];
  }
}

TEST_P(GlmFixture, MatchesLlamaCpp) {
  const fs::path ref = dir() / ("ref_llamacpp_" + GetParam().type + ".json");
  if (!fs::exists(ref)) GTEST_SKIP() << "no llama.cpp reference recorded for " << ref.filename();
  auto m = model();
  test::expect_logits_match_llamacpp([&](const std::vector<int32_t>& t) { return teacher_forced(*m, t); },
                                     m->info().n_vocab, ref, exact_weights(), GetParam().preset + "." + GetParam().type);
}

// A prompt fed in pieces (a prefill, then one token at a time past index_topk, where the indexer starts dropping
// keys) gives the one-shot logits: the cached latent rows and indexer keys are what a single pass computes.
// Tolerance: f32 sums in the matmuls are ordered per batch size, so rows may differ by rounding only.
TEST_P(GlmFixture, PrefillThenDecodeEqualsOneShot) {
  auto m = model();
  const std::vector<int32_t> p = longest_prompt(dir() / "ref_hf.json");
  ASSERT_GE(p.size(), 40u);
  const int64_t V = m->info().n_vocab;
  const std::vector<float> one = teacher_forced(*m, p);
  SequenceState st(m->backend(), m->state_shape(), 512, ops::KvType::kF32);
  std::vector<SeqInput> b(1);
  b[0].state = &st;
  b[0].all_logits = true;
  std::vector<float> pieces;
  size_t i = 0;
  for (size_t n : {size_t(7), size_t(1), size_t(3)}) {
    b[0].tokens.assign(p.begin() + i, p.begin() + i + n);
    const auto& lg = m->forward(b);
    pieces.insert(pieces.end(), lg.begin(), lg.end());
    i += n;
  }
  for (; i < p.size(); ++i) {
    b[0].tokens = {p[i]};
    const auto& lg = m->forward(b);
    pieces.insert(pieces.end(), lg.begin(), lg.end());
  }
  ASSERT_EQ(pieces.size(), p.size() * V);
  EXPECT_LE(max_abs_diff(pieces, one), 1e-3) << "pieces vs one shot";
  for (size_t t = 0; t < p.size(); ++t)
    EXPECT_EQ(runtime::argmax(pieces.data() + t * V, V), runtime::argmax(one.data() + t * V, V)) << "row " << t;
}

// Several sequences in one forward (continuous batching) give each one's logits alone: the indexer's keys, scores
// and top-k never mix sequences (ik_llama.cpp's first indexer aliased its mask across a batch).
TEST_P(GlmFixture, BatchedSequencesEqualAlone) {
  auto m = model();
  const std::vector<int32_t> a = longest_prompt(dir() / "ref_hf.json");
  std::vector<int32_t> b(a.rbegin(), a.rend());  // another long sequence, different keys
  b.resize(a.size() - 9);
  const std::vector<float> la = teacher_forced(*m, a), lb = teacher_forced(*m, b);
  SequenceState sa(m->backend(), m->state_shape(), 512, ops::KvType::kF32),
      sb(m->backend(), m->state_shape(), 512, ops::KvType::kF32);
  std::vector<SeqInput> batch(2);
  batch[0] = {&sa, a, true};
  batch[1] = {&sb, b, true};
  const std::vector<float> both = m->forward(batch);
  const int64_t V = m->info().n_vocab;
  ASSERT_EQ(both.size(), (a.size() + b.size()) * V);
  EXPECT_LE(max_abs_diff(std::vector<float>(both.begin(), both.begin() + la.size()), la), 1e-3);
  EXPECT_LE(max_abs_diff(std::vector<float>(both.begin() + la.size(), both.end()), lb), 1e-3);
  // ... and decoding both on together afterwards too.
  batch[0] = {&sa, {a[3]}, false};
  batch[1] = {&sb, {b[5]}, false};
  const std::vector<float> step = m->forward(batch);
  std::vector<int32_t> a2 = a, b2 = b;
  a2.push_back(a[3]);
  b2.push_back(b[5]);
  const std::vector<float> la2 = teacher_forced(*m, a2), lb2 = teacher_forced(*m, b2);
  EXPECT_LE(max_abs_diff(std::vector<float>(step.begin(), step.begin() + V),
                         std::vector<float>(la2.end() - V, la2.end())), 1e-3);
  EXPECT_LE(max_abs_diff(std::vector<float>(step.begin() + V, step.end()),
                         std::vector<float>(lb2.end() - V, lb2.end())), 1e-3);
}

// The prefix cache's snapshot / restore and speculative decoding's rollback carry the latent rows and the indexer
// keys: continuing after either gives the logits of never having left.
TEST_P(GlmFixture, SnapshotRestoreAndRollback) {
  auto m = model();
  const std::vector<int32_t> p = longest_prompt(dir() / "ref_hf.json");
  const size_t half = p.size() / 2;
  SequenceState st(m->backend(), m->state_shape(), 512, ops::KvType::kF16);
  std::vector<SeqInput> b(1);
  b[0] = {&st, std::vector<int32_t>(p.begin(), p.begin() + half), false};
  m->forward(b);
  const models::StateSnapshot snap = st.snapshot();
  b[0].tokens.assign(p.begin() + half, p.end());
  const std::vector<float> want = m->forward(b);
  st.reset();
  st.restore(snap);
  const std::vector<float> got = m->forward(b);
  EXPECT_EQ(got, want) << "restored snapshot";
  // Rollback: three wrong tokens, stepped back, then the right ones.
  st.rollback(static_cast<int64_t>(half));
  b[0].tokens = {p[1], p[2], p[3]};
  m->forward(b);
  st.rollback(static_cast<int64_t>(half));
  b[0].tokens.assign(p.begin() + half, p.end());
  EXPECT_EQ(m->forward(b), want) << "after rollback";
}

TEST_P(GlmFixture, ContextOverflowIsAnError) {
  auto m = model();
  SequenceState st(m->backend(), m->state_shape(), 8, ops::KvType::kF32);
  std::vector<SeqInput> b(1);
  b[0] = {&st, std::vector<int32_t>(9, 1), false};
  EXPECT_THROW(m->forward(b), Error);
  EXPECT_EQ(st.n_past(), 0);
  b[0].tokens = {static_cast<int32_t>(m->info().n_vocab)};
  EXPECT_THROW(m->forward(b), Error);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GlmFixture, ::testing::ValuesIn(glm_cases()), [](const auto& info) {
  std::string n = info.param.preset + "_" + info.param.type + (info.param.repack ? "_x8" : "");
  for (char& ch : n)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

}  // namespace

// Both shapes are committed: without them the tests above would silently run nothing.
TEST(GlmFixtures, Present) {
  std::set<std::string> presets;
  for (const Case& c : glm_cases()) presets.insert(c.preset);
  EXPECT_TRUE(presets.count("glm5-toy")) << "expected tests/fixtures/models/glm5-toy.*.gguf";
  EXPECT_TRUE(presets.count("glm52-toy")) << "expected tests/fixtures/models/glm52-toy.*.gguf";
}

// The references are discriminating: on each fixture's long prompt the indexer drops keys, and transformers with
// index_topk raised past the prompt gives logits farther from the sparse ones than the comparison's tolerance.
TEST(GlmFixtures, IndexerChangesTheReference) {
  for (const char* preset : {"glm5-toy", "glm52-toy"}) {
    const fs::path ref = kModels / preset / "ref_hf.json";
    if (!fs::exists(ref)) continue;
    const json j = test::read_json(ref);
    ASSERT_TRUE(j.contains("indexer_effect")) << preset;
    const json& e = j["indexer_effect"]["len120"];
    EXPECT_GT(e["max_abs_logit_diff"].get<double>(), 0.5) << preset;
    EXPECT_GT(e["rows_with_other_argmax"].get<int>(), 0) << preset;
  }
}

// Routed experts streamed through a cache of 1, 3 or all experts per layer (the way a GLM-5 larger than memory
// runs) give exactly the mapped file's logits, and the counters add up.
TEST(GlmStreaming, SameLogitsAtAnyExpertCacheSize) {
  for (const char* type : {"f16", "q8_0"}) {
    const fs::path gguf = kModels / (std::string("glm5-toy.") + type + ".gguf");
    if (!fs::exists(gguf)) GTEST_SKIP() << "no " << gguf;
    const std::vector<int32_t> p = longest_prompt(kModels / "glm5-toy" / "ref_hf.json");
    auto mapped = load(gguf, true);  // repacked, as a streamed expert is when read into its slot
    const std::vector<float> want = teacher_forced(*mapped, p);
    const int64_t n_expert = mapped->info().n_expert;
    for (int64_t slots : {int64_t(1), int64_t(3), n_expert}) {
      auto m = models::load_model(gguf.string());
      m->repack(RepackScope::kDense);
      m->start({}, slots);
      ASSERT_TRUE(m->experts_streamed());
      EXPECT_EQ(teacher_forced(*m, p), want) << type << ", " << slots << " slots";
      const models::ExpertCacheStats st = m->expert_stats();
      EXPECT_GT(st.misses, 0u);
      EXPECT_GT(st.bytes_read, 0u);
    }
  }
}

// llama.cpp's F32 run (ref_llamacpp_f32.json, from the F32 conversion, not committed) against the committed F16 file:
// the fixture's weights are f16-representable, so both files hold the same numbers. llama.cpp computes q_a / kv_a
// norms with rms_norm_eps (1e-5) where transformers and tern use 1e-6 (contract section 3): ~1.6e-4 in the logits.
TEST(GlmLlamaCpp, F32RunMatchesTheF16File) {
  int checked = 0;
  for (const char* preset : {"glm5-toy", "glm52-toy"}) {
    const fs::path ref = kModels / preset / "ref_llamacpp_f32.json", gguf = kModels / (std::string(preset) + ".f16.gguf");
    if (!fs::exists(ref) || !fs::exists(gguf)) continue;
    auto m = load(gguf, false);
    test::expect_logits_match_llamacpp([&](const std::vector<int32_t>& t) { return teacher_forced(*m, t); },
                                       m->info().n_vocab, ref, true, std::string(preset) + ".f32");
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// The measured rule of the automatic form choice (docs/BENCHMARKS.md): short segments absorbed, a prefill from the
// start expanded, a short segment over a long past absorbed (expanding the past again would cost more than it saves).
TEST(GlmMla, ExpandedFormRule) {
  EXPECT_FALSE(models::mla_expanded_pays(1, 0));
  EXPECT_FALSE(models::mla_expanded_pays(32, 0));
  EXPECT_TRUE(models::mla_expanded_pays(64, 0));
  EXPECT_TRUE(models::mla_expanded_pays(512, 0));
  EXPECT_TRUE(models::mla_expanded_pays(512, 1536));
  EXPECT_TRUE(models::mla_expanded_pays(256, 1024));
  EXPECT_FALSE(models::mla_expanded_pays(128, 1024));
  EXPECT_FALSE(models::mla_expanded_pays(64, 1024));
  EXPECT_FALSE(models::mla_expanded_pays(64, 100));
}

// The expanded form's key weight: attn_k_b {nope, kv_lora, n_head} transposed to rows (h * nope + j) of kv_lora,
// exact as F32, and as Q8_0 (what a quantized file gets) within one Q8_0 step of each 32-block (half a step of
// rounding plus the f16 scale's).
TEST(GlmMla, KeyExpansionTransposes) {
  const int64_t nope = 3, L = 64, H = 2;
  std::vector<float> src(static_cast<size_t>(nope * L * H));
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
  models::Linear wk_b;
  wk_b.type = quant::Type::F32;
  wk_b.data = reinterpret_cast<const uint8_t*>(src.data());
  wk_b.n_in = nope;
  wk_b.n_out = L * H;
  wk_b.row_bytes = sizeof(float) * nope;
  auto want = [&](int64_t r, int64_t l) {  // row r = h * nope + j, column l
    return src[static_cast<size_t>(((r / nope) * L + l) * nope + r % nope)];
  };
  std::vector<float> t(static_cast<size_t>(nope * H * L));
  models::mla_key_expansion(wk_b, nope, L, H, quant::Type::F32, reinterpret_cast<uint8_t*>(t.data()));
  for (int64_t r = 0; r < nope * H; ++r)
    for (int64_t l = 0; l < L; ++l) ASSERT_EQ(t[static_cast<size_t>(r * L + l)], want(r, l)) << r << "," << l;
  const size_t row = quant::row_size(quant::traits(quant::Type::Q8_0), L);
  std::vector<uint8_t> q(row * static_cast<size_t>(nope * H));
  models::mla_key_expansion(wk_b, nope, L, H, quant::Type::Q8_0, q.data());
  std::vector<float> back(static_cast<size_t>(L));
  for (int64_t r = 0; r < nope * H; ++r) {
    quant::dequantize_row(quant::Type::Q8_0, q.data() + r * row, back.data(), L);
    for (int64_t b = 0; b < L; b += 32) {
      float amax = 0;
      for (int64_t l = b; l < b + 32; ++l) amax = std::max(amax, std::fabs(want(r, l)));
      for (int64_t l = b; l < b + 32; ++l)
        ASSERT_NEAR(back[static_cast<size_t>(l)], want(r, l), amax / 127) << r << "," << l;
    }
  }
}

// The state a sequence holds at GLM-5's published geometry (contract section 11): per token and layer the latent row
// (512 + 64) and the indexer key (128), 1408 bytes at f16: 107.25 KiB per token over 78 layers. GLM-5.2's shared
// indexer layers keep no keys.
TEST(GlmState, BytesPerTokenAtGlm5Geometry) {
  models::glm_dsa::Config c;
  c.n_layer = 78;
  c.kv_lora = 512;
  c.rope = 64;
  c.idx_dim = 128;
  c.idx_full.assign(78, true);
  const int64_t n_ctx = 4096;
  EXPECT_EQ(SequenceState::bytes_for(models::glm_dsa::state_shape(c), n_ctx, ops::KvType::kF16),
            size_t(78) * 1408 * n_ctx);
  for (int64_t i = 0; i < 78; ++i) c.idx_full[static_cast<size_t>(i)] = i < 2 || (i - 2) % 4 == 0;  // GLM-5.2
  const size_t full = static_cast<size_t>(std::count(c.idx_full.begin(), c.idx_full.end(), true));
  EXPECT_EQ(SequenceState::bytes_for(models::glm_dsa::state_shape(c), n_ctx, ops::KvType::kF16),
            (size_t(78) * 1152 + full * 256) * n_ctx);
}

// The MTP (NextN) block's draft logits against its definition (contract section 10; the concat order [enorm(E[t+1]) ;
// hnorm(h_t)] as in vLLM's deepseek_mtp.py), composed independently of Forward::run_draft: the block's own part,
// x_r = eh_proj([enorm(E[p_r]) ; hnorm(h_{r-1})]), in double here from the file's weights; its decoder layer and head
// as a one-layer glm-dsa file made of the block's tensors (blk.3.* as blk.0.*, shared_head_norm as output_norm, the
// main output head), fed x_r as its token embeddings, through the trunk path the fixtures prove against transformers.
// The prompt (longer than index_topk) makes the block's indexer drop keys. Tolerance: as PrefillThenDecodeEqualsOneShot
// (f32 sums in another order; x_r rounded from double), 1e-3 on logits, and the same argmax.
TEST(GlmMtp, DraftLogitsEqualTheBlockRunAsAOneLayerModel) {
  const fs::path src = kModels / "glm5-toy.f16.gguf";
  if (!fs::exists(src)) GTEST_SKIP() << "missing " << src;
  auto m = load(src, false);
  ASSERT_TRUE(m->can_draft());
  const int64_t D = m->info().n_embd, V = m->info().n_vocab;
  const std::vector<int32_t> p = longest_prompt(kModels / "glm5-toy" / "ref_hf.json");
  const int64_t L = static_cast<int64_t>(p.size());
  ASSERT_GT(L, 17);  // index_topk 16: the later rows select keys
  SequenceState st(m->backend(), m->state_shape(), 512, ops::KvType::kF32);
  std::vector<SeqInput> b(1);
  b[0].state = &st;
  b[0].tokens = p;
  b[0].hidden = true;
  m->forward(b);
  const std::vector<float> h = m->hidden();
  ASSERT_EQ(static_cast<int64_t>(h.size()), L * D);
  std::vector<models::DraftInput> d(1);
  d[0].state = &st;
  d[0].tokens.assign(p.begin() + 1, p.end());
  d[0].hidden.assign(h.begin(), h.end() - D);  // row r (token p_r) with h_{r-1}
  d[0].all_logits = true;
  const std::vector<float> got = m->forward_draft(d);
  ASSERT_EQ(static_cast<int64_t>(got.size()), (L - 1) * V);

  const gguf::File f = gguf::File::open(src.string());
  auto floats = [&](const std::string& name) {
    const gguf::TensorInfo& t = f.get_tensor(name);
    std::vector<float> v(static_cast<size_t>(t.n_elements));
    quant::dequantize_row(t.type, t.data, v.data(), t.n_elements);
    return v;
  };
  const std::vector<float> E = floats("token_embd.weight"), en = floats("blk.3.nextn.enorm.weight"),
                           hn = floats("blk.3.nextn.hnorm.weight"), W = floats("blk.3.nextn.eh_proj.weight");
  const double eps = f.get_f32("glm-dsa.attention.layer_norm_rms_epsilon");
  auto rms = [&](const float* v, const std::vector<float>& w, double* out) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += double(v[i]) * v[i];
    const double s = 1.0 / std::sqrt(ss / D + eps);
    for (int64_t i = 0; i < D; ++i) out[i] = v[i] * s * w[static_cast<size_t>(i)];
  };
  std::vector<float> X(static_cast<size_t>(V * D), 0.0f);  // the one-layer model's token_embd: row k = x_{k+1}
  std::vector<double> cat(static_cast<size_t>(2 * D));
  for (int64_t r = 1; r < L; ++r) {
    rms(E.data() + p[static_cast<size_t>(r)] * D, en, cat.data());
    rms(h.data() + (r - 1) * D, hn, cat.data() + D);
    for (int64_t o = 0; o < D; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < 2 * D; ++i) acc += double(W[static_cast<size_t>(o * 2 * D + i)]) * cat[static_cast<size_t>(i)];
      X[static_cast<size_t>((r - 1) * D + o)] = static_cast<float>(acc);
    }
  }

  gguf::Writer w;
  const std::set<std::string> replaced = {"glm-dsa.block_count", "glm-dsa.leading_dense_block_count",
                                          "glm-dsa.nextn_predict_layers", "glm-dsa.attention.indexer.types"};
  for (const gguf::Value& kv : f.metadata()) {
    const std::string k(kv.key());
    if ((!k.starts_with("glm-dsa.") && k != "general.architecture") || replaced.count(k)) continue;
    switch (kv.type()) {
      case gguf::ValueType::U32: w.add_u32(k, kv.as_u32()); break;
      case gguf::ValueType::F32: w.add_f32(k, kv.as_f32()); break;
      case gguf::ValueType::Bool: w.add_bool(k, kv.as_bool()); break;
      case gguf::ValueType::String: w.add_str(k, kv.as_str()); break;
      default: FAIL() << "glm5-toy key " << k << " of an unexpected type";
    }
  }
  w.add_u32("glm-dsa.block_count", 1);
  w.add_u32("glm-dsa.leading_dense_block_count", 0);
  w.add_u32("glm-dsa.nextn_predict_layers", 0);
  w.add_array("glm-dsa.attention.indexer.types", std::vector<bool>{true});
  auto ne = [](const gguf::TensorInfo& t) { return std::vector<int64_t>(t.ne, t.ne + std::max<uint32_t>(t.n_dims, 1)); };
  auto view = [&](const std::string& as, const gguf::TensorInfo& t) {
    w.add_tensor_view(as, t.type, ne(t), {t.data, static_cast<size_t>(t.n_bytes)});
  };
  for (const gguf::TensorInfo& t : f.tensors()) {
    const std::string n(t.name);
    if (n.starts_with("blk.3.") && n.find(".nextn.") == std::string::npos) view("blk.0." + n.substr(6), t);
  }
  view("output.weight", f.get_tensor("output.weight"));
  view("output_norm.weight", f.get_tensor("blk.3.nextn.shared_head_norm.weight"));
  w.add_tensor_view("token_embd.weight", quant::Type::F32, {D, V}, {reinterpret_cast<const uint8_t*>(X.data()), X.size() * 4});
  const fs::path one = fs::temp_directory_path() / ("tern-glm5-mtp-as-layer-" + std::to_string(::getpid()) + ".gguf");
  w.write(one.string());
  auto block = load(one, false);
  fs::remove(one);  // mapped: the file stays readable until unmapped
  ASSERT_EQ(block->info().n_vocab, V);
  std::vector<int32_t> rows(static_cast<size_t>(L - 1));
  for (int64_t k = 0; k < L - 1; ++k) rows[static_cast<size_t>(k)] = static_cast<int32_t>(k);
  const std::vector<float> want = teacher_forced(*block, rows);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_LE(max_abs_diff(got, want), 1e-3);
  for (int64_t r = 0; r < L - 1; ++r)
    EXPECT_EQ(runtime::argmax(got.data() + r * V, V), runtime::argmax(want.data() + r * V, V)) << "draft row " << r + 1;
}

// Whether the MTP block drafts is known from the file alone (Config::mtp_drafts), so `tern info` and the planner say
// what the loaded model does: glm5-toy's block has its own indexer and drafts; the same file without the block's
// indexer tensors (a model with an indexer whose block would share one) loads and does not draft, and says so.
TEST(GlmMtp, WhetherTheBlockDraftsIsKnownFromTheFile) {
  const fs::path src = kModels / "glm5-toy.f16.gguf";
  if (!fs::exists(src)) GTEST_SKIP() << "missing " << src;
  const gguf::File f = gguf::File::open(src.string());
  EXPECT_TRUE(models::describe_model(f)->info().mtp_drafts);
  EXPECT_TRUE(load(src, false)->can_draft());

  gguf::Writer w;
  for (const gguf::Value& kv : f.metadata()) {
    const std::string k(kv.key());
    if (!k.starts_with("glm-dsa.") && k != "general.architecture") continue;
    switch (kv.type()) {
      case gguf::ValueType::U32: w.add_u32(k, kv.as_u32()); break;
      case gguf::ValueType::F32: w.add_f32(k, kv.as_f32()); break;
      case gguf::ValueType::Bool: w.add_bool(k, kv.as_bool()); break;
      case gguf::ValueType::String: w.add_str(k, kv.as_str()); break;
      case gguf::ValueType::Array: {  // indexer.types: booleans
        std::vector<bool> v(static_cast<size_t>(kv.array_size()));
        for (uint64_t i = 0; i < kv.array_size(); ++i) v[i] = kv.array_i64(i) != 0;
        w.add_array(k, v);
        break;
      }
      default: FAIL() << "glm5-toy key " << k << " of an unexpected type";
    }
  }
  int dropped = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const std::string n(t.name);
    if (n.starts_with("blk.3.indexer.")) {
      ++dropped;
      continue;
    }
    w.add_tensor_view(n, t.type, std::vector<int64_t>(t.ne, t.ne + std::max<uint32_t>(t.n_dims, 1)),
                      {t.data, static_cast<size_t>(t.n_bytes)});
  }
  ASSERT_GT(dropped, 0);
  const fs::path out = fs::temp_directory_path() / ("tern-glm5-mtp-no-indexer-" + std::to_string(::getpid()) + ".gguf");
  w.write(out.string());
  const gguf::File g = gguf::File::open(out.string());
  EXPECT_FALSE(models::describe_model(g)->info().mtp_drafts);
  auto m = load(out, false);
  fs::remove(out);
  EXPECT_FALSE(m->can_draft());
  EXPECT_FALSE(m->info().mtp_drafts);
}
