// Scheduler: a sequence's tokens are the same alone or batched with others (greedy and seeded sampling, with
// chunked prefill running beside decoding streams), requests that cannot fit are refused, cancel frees a sequence.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "core/error.h"
#include "runtime/generate.h"
#include "serve/scheduler.h"
#include "text/gguf_vocab.h"

using namespace tern;
using namespace tern::serve;

namespace {

const char* kModel = TERN_FIXTURES_DIR "/../../models/tern-tiny-q35moe.gguf";

struct Fixture {
  std::unique_ptr<runtime::Engine> engine;
  std::unique_ptr<text::Tokenizer> tok;
};

Fixture& model() {
  static Fixture f = [] {
    runtime::EngineOptions o;
    o.model_path = kModel;
    o.n_ctx = 256;
    o.threads = 1;  // tests share two cores with other jobs; results do not depend on the thread count
    Fixture x;
    x.engine = std::make_unique<runtime::Engine>(o);
    x.tok = std::make_unique<text::Tokenizer>(text::tokenizer_data_from_gguf(*x.engine->model().file));
    return x;
  }();
  return f;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  Finish finish;
};

// Requests leave their sequence just after they post the end; stats settle a moment later.
void settle(const Scheduler& s) {
  for (int i = 0; i < 500 && s.stats().active > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

Outcome drain(Completion& c) {
  Outcome o;
  while (!c.wait(&o.text, std::chrono::milliseconds(200))) {}
  o.tokens = c.tokens();
  o.finish = c.finish();
  return o;
}

std::vector<int32_t> prompt_of(int n, int salt) {
  std::vector<int32_t> p;
  const std::string words = "And the light shineth in darkness; and the darkness comprehended it not. ";
  std::string s;
  while (static_cast<int>(p.size()) < n) {
    s += words.substr(salt % 7) + std::to_string(salt) + " ";
    p = model().tok->encode(s, false);
  }
  p.resize(n);
  return p;
}

GenRequest request(int n_prompt, int salt, int max_tokens, bool sampled = false) {
  GenRequest r;
  r.prompt = prompt_of(n_prompt, salt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = sampled ? 0.9f : 0.0f;
  r.sampling.seed = 1234 + salt;
  return r;
}

}  // namespace

// The same requests, run one at a time and then five at once over three sequences (two wait in the queue), with a
// prompt budget of 32 tokens per step so long prompts are chunked beside running streams.
TEST(Scheduler, BatchedEqualsAlone) {
  std::vector<GenRequest> reqs = {request(5, 1, 20), request(70, 2, 12), request(150, 3, 20, true),
                                  request(33, 4, 16), request(9, 5, 24, true)};
  SchedulerOptions so;
  so.batch = 32;
  std::vector<Outcome> alone;
  {
    so.parallel = 1;
    Scheduler s(*model().engine, *model().tok, so);
    for (const auto& r : reqs) alone.push_back(drain(*s.submit(r)));
  }
  so.parallel = 3;
  Scheduler s(*model().engine, *model().tok, so);
  std::vector<std::shared_ptr<Completion>> cs;
  for (const auto& r : reqs) cs.push_back(s.submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    Outcome b = drain(*cs[i]);
    EXPECT_EQ(b.tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(b.text, alone[i].text) << "request " << i;
    EXPECT_EQ(b.finish, Finish::kLength);
    EXPECT_EQ(static_cast<int>(b.tokens.size()), reqs[i].max_tokens);
  }
  settle(s);
  SchedulerStats st = s.stats();
  EXPECT_EQ(st.requests_done, 5);
  EXPECT_EQ(st.active, 0);
  EXPECT_EQ(st.queued, 0);
  EXPECT_EQ(st.prompt_tokens, 5 + 70 + 150 + 33 + 9);
}

// A prompt shorter than the step budget is fed in one piece, so the scheduler gives what generate() gives.
TEST(Scheduler, MatchesGenerate) {
  GenRequest r = request(40, 7, 16);
  r.ignore_eos = false;
  auto seq = model().engine->new_sequence();
  runtime::Sampler sampler(r.sampling);
  runtime::GenerateOptions g;
  g.n_predict = r.max_tokens;
  runtime::GenerateResult ref = runtime::generate(*model().engine, *seq, *model().tok, sampler, r.prompt, g, nullptr);
  SchedulerOptions so;
  Scheduler s(*model().engine, *model().tok, so);
  Outcome o = drain(*s.submit(r));
  EXPECT_EQ(o.tokens, ref.tokens);
  EXPECT_EQ(o.text, ref.text);
}

TEST(Scheduler, StopString) {
  SchedulerOptions so;
  Scheduler s(*model().engine, *model().tok, so);
  Outcome full = drain(*s.submit(request(12, 8, 40)));
  ASSERT_GT(full.text.size(), 12u);
  GenRequest r = request(12, 8, 40);
  const std::string stop = full.text.substr(full.text.size() / 2, 3);
  r.stop = {stop};
  Outcome o = drain(*s.submit(r));
  EXPECT_EQ(o.finish, Finish::kStop);
  EXPECT_EQ(o.text, full.text.substr(0, full.text.find(stop)));
}

TEST(Scheduler, RefusesWhatCannotFit) {
  SchedulerOptions so;
  Scheduler s(*model().engine, *model().tok, so);
  EXPECT_EQ(s.n_ctx(), 256);
  try {
    s.submit(request(200, 1, 100));
    FAIL() << "accepted a request over the context";
  } catch (const AdmissionError& e) {
    EXPECT_FALSE(e.queue_full);
    EXPECT_NE(std::string(e.what()).find("300 tokens"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.submit(request(256, 1, -1)), AdmissionError);  // no room for even one generated token
  GenRequest empty = request(5, 1, 4);
  empty.prompt.clear();
  EXPECT_THROW(s.submit(empty), AdmissionError);
  GenRequest bad_id = request(5, 1, 4);
  bad_id.prompt[2] = 1 << 30;
  EXPECT_THROW(s.submit(bad_id), AdmissionError);
  GenRequest bad_p = request(5, 1, 4);
  bad_p.sampling.top_p = 0;
  EXPECT_THROW(s.submit(bad_p), Error);
  // Nothing was queued by the refusals; a fitting request still runs.
  Outcome o = drain(*s.submit(request(200, 1, 56)));
  EXPECT_EQ(o.tokens.size(), 56u);
  settle(s);
  EXPECT_EQ(s.stats().requests_done, 1);
}

TEST(Scheduler, QueueFull) {
  SchedulerOptions so;
  so.parallel = 1;
  so.max_queue = 0;
  Scheduler s(*model().engine, *model().tok, so);
  auto a = s.submit(request(10, 1, 200));
  std::string text;
  while (a->n_generated() == 0 && !a->wait(&text, std::chrono::milliseconds(5))) {}  // a holds the only sequence
  try {
    s.submit(request(10, 2, 4));
    FAIL() << "queued past --max-queue";
  } catch (const AdmissionError& e) {
    EXPECT_TRUE(e.queue_full);
  }
  a->cancel();
  drain(*a);
}

TEST(Scheduler, CancelFreesTheSequence) {
  SchedulerOptions so;
  so.parallel = 2;
  Scheduler s(*model().engine, *model().tok, so);
  auto a = s.submit(request(10, 1, 240));
  auto b = s.submit(request(10, 2, 8));
  std::string text;
  while (a->n_generated() < 3) a->wait(&text, std::chrono::milliseconds(5));
  a->cancel();
  Outcome oa = drain(*a);
  EXPECT_EQ(oa.finish, Finish::kCancelled);
  EXPECT_LT(oa.tokens.size(), 240u);
  Outcome ob = drain(*b);
  EXPECT_EQ(ob.tokens.size(), 8u);
  // The freed sequence takes new work, and a request cancelled while queued never runs.
  auto c = s.submit(request(10, 3, 8));
  EXPECT_EQ(drain(*c).tokens.size(), 8u);
  auto d = s.submit(request(10, 4, 200)), e = s.submit(request(10, 5, 200)), f = s.submit(request(10, 6, 8));
  f->cancel();
  Outcome of = drain(*f);
  EXPECT_EQ(of.finish, Finish::kCancelled);
  EXPECT_TRUE(of.tokens.empty());
  d->cancel();
  e->cancel();
  drain(*d);
  drain(*e);
  settle(s);
  SchedulerStats st = s.stats();
  EXPECT_EQ(st.active, 0);
  EXPECT_EQ(st.requests_cancelled, 4);
  EXPECT_EQ(st.requests_done, 2);
}
