// The model registry and interface (models/registry.h, models/model.h): a GGUF is found by its
// general.architecture; the header-only description (ModelShape, for `tern plan`) agrees with the loaded model;
// a forward through the interface gives the bits of the architecture's own forward; an architecture tern does not
// run is refused with the file's name and the supported list.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "models/qwen35moe/forward.h"
#include "models/qwen35moe/state.h"
#include "models/registry.h"

namespace fs = std::filesystem;
using namespace tern;

namespace {

const std::string kModel = (fs::path(TERN_FIXTURES_DIR) / "models" / "q35-ratio.q8_0.gguf").string();

}  // namespace

TEST(Registry, DescribeAgreesWithTheLoadedModel) {
  const gguf::File f = gguf::File::open(kModel);
  const auto shape = models::describe_model(f);
  const auto model = models::load_model(kModel);
  const models::ModelInfo &a = shape->info(), &b = model->info();
  EXPECT_EQ(a.arch, "qwen35moe");
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.n_vocab, b.n_vocab);
  EXPECT_EQ(a.n_embd, b.n_embd);
  EXPECT_EQ(a.n_ctx_train, b.n_ctx_train);
  EXPECT_EQ(a.n_expert, b.n_expert);
  EXPECT_EQ(a.summary, b.summary);
  // The state the planner counts is the state a sequence holds.
  const models::StateShape sa = shape->state_shape();
  ASSERT_EQ(static_cast<int64_t>(sa.size()), a.n_layer);
  models::SequenceState st(model->backend(), model->state_shape(), 64, ops::KvType::kF16);
  EXPECT_EQ(models::SequenceState::bytes_for(sa, 64, ops::KvType::kF16), st.bytes());
  for (bool repack : {false, true}) {
    const models::WeightBytes wa = shape->weight_bytes(repack, true), wb = model->weight_bytes(repack, true);
    EXPECT_EQ(wa.dense, wb.dense);
    EXPECT_EQ(wa.experts, wb.experts);
    EXPECT_EQ(wa.expert_bytes, wb.expert_bytes);
  }
}

TEST(Registry, InterfaceForwardIsTheArchitecturesForward) {
  const auto model = models::load_model(kModel);
  model->start({}, 0);
  auto direct = models::qwen35moe::Model::load(kModel);
  models::qwen35moe::Forward fw(*direct);
  const std::vector<int32_t> toks = {1, 5, 9, 2, 7};
  models::SequenceState s1(model->backend(), model->state_shape(), 32, ops::KvType::kF32);
  models::SequenceState s2(*direct->backend, models::qwen35moe::state_shape(direct->config), 32, ops::KvType::kF32);
  std::vector<models::SeqInput> b1{{&s1, toks, true}}, b2{{&s2, toks, true}};
  const std::vector<float> l1 = model->forward(b1);
  EXPECT_EQ(l1, fw.run(b2));
  EXPECT_EQ(s1.n_past(), 5);
  EXPECT_FALSE(model->experts_streamed());
}

TEST(Registry, UnknownArchitectureIsRefusedWithTheSupportedList) {
  const fs::path p = fs::temp_directory_path() / ("tern_registry_" + std::to_string(::getpid()) + ".gguf");
  gguf::Writer w;
  w.add_str("general.architecture", "llama");
  w.write(p.string());
  for (int describe = 0; describe < 2; ++describe) {
    try {
      if (describe) {
        const gguf::File f = gguf::File::open(p.string());
        models::describe_model(f);
      } else {
        models::load_model(p.string());
      }
      ADD_FAILURE() << "accepted a llama file";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(p.string()), std::string::npos) << m;
      EXPECT_NE(m.find("'llama' is not supported"), std::string::npos) << m;
      for (const std::string& a : models::supported_architectures()) EXPECT_NE(m.find(a), std::string::npos) << m;
    }
  }
  fs::remove(p);
  EXPECT_EQ(models::supported_architectures().front(), "qwen35moe");
}
