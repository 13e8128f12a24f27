// The memory planner (runtime/memory_plan) against what the engine really allocates: its weight figures equal
// the tensors the model loads, its state figure equals SequenceState, a budget buys the expert slots the
// arithmetic says, too small a budget is refused with the numbers, and sizes parse strictly. Also the engine's
// chunked prompt evaluation (bounded buffers) gives the logits of one forward.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "formats/gguf.h"
#include "models/expert_store.h"
#include "models/qwen35moe/model.h"
#include "models/qwen35moe/state.h"
#include "runtime/engine.h"
#include "runtime/memory_plan.h"

namespace fs = std::filesystem;
using namespace tern;
using namespace tern::runtime;
using models::ExpertStore;
using models::qwen35moe::Model;
using models::RepackReport;
using models::RepackScope;
using models::SequenceState;

namespace {

const fs::path kModels = fs::path(TERN_FIXTURES_DIR) / "models";

class PlanFixture : public ::testing::TestWithParam<std::string> {
 protected:
  std::string path() const { return (kModels / GetParam()).string(); }
};

MemoryRequest request(int64_t n_ctx, uint64_t budget = 0, int64_t slots = 0) {
  MemoryRequest r;
  r.n_ctx = n_ctx;
  r.budget = budget;
  r.expert_slots = slots;
  return r;
}

}  // namespace

// The planner's weight figures equal what the loaded model holds: the file's tensors, or with repacking the
// repacked matrices in place of the file bytes they replace (and the expert slots as the store sizes them).
TEST_P(PlanFixture, WeightFiguresMatchTheLoadedModel) {
  for (bool repack : {false, true}) {
    auto m = Model::load(path());
    MemoryRequest r = request(256);
    r.repack = repack;
    const models::qwen35moe::Shape shape(*m->file);
    const MemoryPlan p = plan_memory(shape, r);
    EXPECT_EQ(p.repacked, repack && GetParam().find(".f") == std::string::npos);  // float files: nothing to repack
    // Every loaded tensor is either dense or a routed expert; unused (MTP) tensors are neither.
    uint64_t loaded = 0;
    for (const auto& t : m->file->tensors()) {
      const std::string name(t.name);
      if (std::find(m->weights.unused.begin(), m->weights.unused.end(), name) == m->weights.unused.end()) loaded += t.n_bytes;
    }
    const RepackReport rep = m->repack(repack ? RepackScope::kAll : RepackScope::kNone);
    EXPECT_EQ(p.repacked, rep.matrices > 0);
    EXPECT_EQ(p.dense + p.experts, loaded - rep.file_bytes + rep.bytes) << (repack ? "repacked" : "file layout");
    auto streamed = Model::load(path());
    streamed->repack(repack ? RepackScope::kDense : RepackScope::kNone);
    const std::vector<size_t> per_layer = ExpertStore::expert_bytes_per_layer(streamed->expert_layout());
    ASSERT_EQ(p.expert_bytes.size(), per_layer.size());
    for (size_t i = 0; i < per_layer.size(); ++i) EXPECT_EQ(p.expert_bytes[i], per_layer[i]) << "layer " << i;
    SequenceState st(*m->backend, models::qwen35moe::state_shape(m->config), 256, ops::KvType::kF16);
    EXPECT_EQ(p.state, st.bytes());
    EXPECT_FALSE(p.streamed);
    EXPECT_EQ(p.total(), p.dense + p.experts + p.state + p.buffers + p.runtime);
  }
}

TEST_P(PlanFixture, BudgetBuysTheSlotsItCanHold) {
  auto m = Model::load(path());
  const auto& c = m->config;
  const models::qwen35moe::Shape shape(*m->file);
  const MemoryPlan free_plan = plan_memory(shape, request(256));
  const uint64_t fixed = free_plan.dense + free_plan.state + free_plan.buffers + free_plan.runtime;
  const uint64_t slot = ExpertStore::cache_bytes(m->expert_layout(), 1);
  // Exactly three slots' worth above the fixed part (plus less than one more slot) -> 3 per layer.
  if (c.n_expert > 3) {
    const MemoryPlan p = plan_memory(shape, request(256, fixed + 3 * slot + slot / 2));
    EXPECT_TRUE(p.fits);
    EXPECT_TRUE(p.streamed);
    EXPECT_EQ(p.slots, 3);
    EXPECT_EQ(p.expert_cache, ExpertStore::cache_bytes(m->expert_layout(), 3));
    EXPECT_LE(p.total(), p.budget);
  }
  // A budget holding everything keeps the experts mapped.
  const MemoryPlan all = plan_memory(shape, request(256, free_plan.total()));
  EXPECT_TRUE(all.fits);
  EXPECT_FALSE(all.streamed);
  // Below the dense part + one expert per layer: refused, and the verdict gives both numbers.
  const MemoryPlan tight = plan_memory(shape, request(256, fixed + slot - 1));
  EXPECT_FALSE(tight.fits);
  EXPECT_EQ(tight.minimum(), fixed + slot);
  EXPECT_NE(tight.verdict.find(format_bytes(tight.minimum())), std::string::npos) << tight.verdict;
  EXPECT_NE(tight.verdict.find(format_bytes(fixed + slot - 1)), std::string::npos) << tight.verdict;
  // An explicit cache size wins over the budget's choice and is range-checked.
  EXPECT_EQ(plan_memory(shape, request(256, 0, 1)).slots, 1);
  EXPECT_THROW(plan_memory(shape, request(256, 0, c.n_expert + 1)), Error);
}

// --parallel auto: K whole-context sequences fit in a quarter of the budget and K + 1 would not; when fewer than the
// cap fit whole, more sequences share a KV budget that holds at least one whole context, and the planner's state
// for them (recurrent state each + the shared rows) stays within the room.
TEST_P(PlanFixture, AutoParallelFillsTheRoomForState) {
  auto m = Model::load(path());
  const models::qwen35moe::Shape shape(*m->file);
  const int64_t n_ctx = 512;
  for (int64_t ckpt : {int64_t{0}, int64_t{4}}) {
    MemoryRequest one = request(n_ctx);
    one.checkpoints = ckpt;
    const uint64_t per_plan = plan_memory(shape, one).state;
    for (uint64_t budget : {per_plan * 4 * 5 + per_plan, per_plan * 4 * 5 - 1, per_plan, per_plan * 4 * 1000,
                            per_plan * 4 * 70}) {
      SCOPED_TRACE(budget);
      const AutoParallel a = auto_parallel(shape, ops::KvType::kF16, n_ctx, ckpt, budget);
      EXPECT_EQ(a.per_sequence, per_plan);
      EXPECT_EQ(a.fixed + uint64_t(n_ctx) * a.per_token, per_plan);
      EXPECT_EQ(a.room, budget / 4);
      EXPECT_GE(a.n, 1);
      EXPECT_LE(a.n, kMaxAutoParallel);
      MemoryRequest r = one;
      r.n_parallel = a.n;
      r.kv_tokens = a.kv_tokens;
      const uint64_t state = plan_memory(shape, r).state;
      if (a.kv_tokens == 0) {
        if (a.n > 1) {
          EXPECT_LE(uint64_t(a.n) * per_plan, a.room);
        }
        if (a.n < kMaxAutoParallel) {
          EXPECT_GT(uint64_t(a.n + 1) * per_plan, a.room);
        }
        EXPECT_EQ(state, uint64_t(a.n) * per_plan);
      } else {
        EXPECT_GE(a.kv_tokens, n_ctx);               // any request that fits a context can run
        EXPECT_GE(a.kv_tokens, int64_t(std::max<uint64_t>(1, a.room / per_plan)) * n_ctx);  // never fewer rows
        EXPECT_LT(a.kv_tokens, a.n * n_ctx);         // else no sharing would be needed
        EXPECT_GT(uint64_t(a.n) * per_plan, a.room);  // more sequences than fit whole
        EXPECT_LE(state, a.room);
        EXPECT_EQ(state, uint64_t(a.n) * a.fixed + uint64_t(a.kv_tokens) * a.per_token);
      }
    }
    // Five whole contexts and ten more recurrent states fit: 15 sequences share the rows of five contexts (at a
    // context long enough that ten recurrent states are less than one context's rows).
    const AutoParallel shape_of = auto_parallel(shape, ops::KvType::kF16, n_ctx, ckpt, 0);
    const int64_t long_ctx = std::max<int64_t>(n_ctx, int64_t(20 * shape_of.fixed / shape_of.per_token) + 1);
    const uint64_t per_long = shape_of.fixed + uint64_t(long_ctx) * shape_of.per_token;
    const AutoParallel more =
        auto_parallel(shape, ops::KvType::kF16, long_ctx, ckpt, 4 * (5 * per_long + 10 * shape_of.fixed));
    EXPECT_EQ(more.n, 15);
    EXPECT_EQ(more.kv_tokens, 5 * long_ctx);
    // Exactly five whole contexts: one more sequence would leave fewer rows, so five whole ones.
    const AutoParallel five = auto_parallel(shape, ops::KvType::kF16, n_ctx, ckpt, per_plan * 4 * 5);
    EXPECT_EQ(five.n, 5);
    EXPECT_EQ(five.kv_tokens, 0);
    EXPECT_EQ(auto_parallel(shape, ops::KvType::kF16, n_ctx, ckpt, per_plan * 4 * 1000).n, kMaxAutoParallel);
    EXPECT_EQ(auto_parallel(shape, ops::KvType::kF16, n_ctx, ckpt, per_plan * 4 * 1000).kv_tokens, 0);
    EXPECT_EQ(auto_parallel(shape, ops::KvType::kF16, n_ctx, ckpt, per_plan).n, 1);  // never below one
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PlanFixture,
                         ::testing::Values("q35-ratio.q4_k_m.gguf", "odd.f32.gguf", "q35-ratio.f16.gguf"),
                         [](const auto& info) {
                           std::string n = info.param.substr(0, info.param.size() - 5);
                           for (auto& ch : n) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(ParseSize, UnitsAndErrors) {
  EXPECT_EQ(parse_size("12G", "--mem-budget"), uint64_t{12} << 30);
  EXPECT_EQ(parse_size("512M", "--mem-budget"), uint64_t{512} << 20);
  EXPECT_EQ(parse_size("1.5GiB", "--mem-budget"), uint64_t{3} << 29);
  EXPECT_EQ(parse_size("64kb", "--mem-budget"), uint64_t{64} << 10);
  EXPECT_EQ(parse_size("1000", "--mem-budget"), 1000u);
  EXPECT_EQ(parse_size("2T", "--mem-budget"), uint64_t{2} << 40);
  for (const char* bad : {"", "G", "12X", "-1G", "0", "12 G", "nan", "1e30T", "12GG"}) {
    try {
      parse_size(bad, "--mem-budget");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--mem-budget"), std::string::npos) << e.what();
    }
  }
}

// Prompts longer than kMaxBatchRows go through the forward in chunks; the logits equal one forward's.
TEST(EngineEval, LongPromptsInChunksEqualOneForward) {
  EngineOptions o;
  o.model_path = (kModels / "q35-ratio.f16.gguf").string();
  o.n_ctx = 2 * kMaxBatchRows + 100;
  o.threads = 1;
  o.kv_type = "f32";
  Engine e(o);
  std::vector<int32_t> toks;
  for (int64_t i = 0; i < kMaxBatchRows + 77; ++i) toks.push_back(static_cast<int32_t>((i * 37 + 11) % e.info().n_vocab));
  auto s1 = e.new_sequence();
  const std::vector<float> chunked = e.eval(*s1, toks, true);
  EXPECT_EQ(s1->n_past(), static_cast<int64_t>(toks.size()));
  auto s2 = e.new_sequence();
  std::vector<models::SeqInput> b(1);
  b[0] = {s2.get(), toks, true};
  EXPECT_EQ(chunked, e.model().forward(b));
  // The last row alone, as generation asks for it.
  auto s3 = e.new_sequence();
  const std::vector<float> last = e.eval(*s3, toks, false);
  EXPECT_TRUE(std::equal(last.begin(), last.end(), chunked.end() - e.info().n_vocab));
  // A bad token anywhere is refused before any chunk runs.
  auto s4 = e.new_sequence();
  toks.back() = static_cast<int32_t>(e.info().n_vocab);
  EXPECT_THROW(e.eval(*s4, toks, false), Error);
  EXPECT_EQ(s4->n_past(), 0);
}
