// Scheduler: a sequence's tokens are the same alone or batched with others (greedy and seeded sampling, with
// chunked prefill running beside decoding streams), requests that cannot fit are refused, cancel frees a sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>

#include "core/error.h"
#include "runtime/generate.h"
#include "serve/api.h"
#include "serve/scheduler.h"
#include "text/chat_template.h"
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
    x.tok = std::make_unique<text::Tokenizer>(text::tokenizer_data_from_gguf(x.engine->model().file()));
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

// A follow-up turn resumes from the cached end of the previous answer (or an earlier end of message) and gives
// exactly the tokens a server without the cache gives.
TEST(Scheduler, PrefixCacheSameOutput) {
  const int32_t im_end = *model().tok->find_token("<|im_end|>");
  std::vector<int32_t> p1 = prompt_of(30, 1);
  p1[12] = im_end;  // an end of message inside the prompt
  GenRequest r1 = request(5, 1, 20);
  r1.prompt = p1;
  std::vector<Outcome> out[2];
  std::vector<int64_t> cached;
  for (int with_cache = 0; with_cache < 2; ++with_cache) {
    SchedulerOptions so;
    so.batch = 16;
    so.cache_bytes = with_cache ? size_t{64} << 20 : 0;
    Scheduler s(*model().engine, *model().tok, so);
    Outcome o1 = drain(*s.submit(r1));
    GenRequest r2 = r1;  // turn 2: turn 1 + its answer (all but the unfed last token) + new tokens
    r2.prompt.insert(r2.prompt.end(), o1.tokens.begin(), o1.tokens.end() - 1);
    for (int32_t t : prompt_of(10, 2)) r2.prompt.push_back(t);
    GenRequest r3 = r1;  // shares only the first message with turn 1
    r3.prompt.resize(13);
    for (int32_t t : prompt_of(25, 3)) r3.prompt.push_back(t);
    auto c2 = s.submit(r2);
    Outcome o2 = drain(*c2);
    auto c3 = s.submit(r3);
    Outcome o3 = drain(*c3);
    out[with_cache] = {o1, o2, o3};
    if (with_cache) {
      cached = {c2->n_cached(), c3->n_cached()};
      EXPECT_EQ(s.stats().cache.hits, 2);
      EXPECT_LE(s.stats().cache.bytes, s.stats().cache.budget);
    } else {
      EXPECT_EQ(c2->n_cached(), 0);
    }
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out[0][i].tokens, out[1][i].tokens) << "turn " << i;
    EXPECT_EQ(out[0][i].text, out[1][i].text) << "turn " << i;
  }
  ASSERT_EQ(cached.size(), 2u);
  EXPECT_EQ(cached[0], static_cast<int64_t>(p1.size() + out[1][0].tokens.size() - 1));  // the whole first answer
  EXPECT_EQ(cached[1], 13);                                                            // the first message
}

// Chat through the OpenAI request parser with the bundled model, whose template is the Qwen3.5 one (earlier answers
// re-render without their think blocks). A follow-up turn whose history ends with the answer as the server
// returned it extends the first turn's tokens, resumes from the snapshot at the end of that answer, and answers
// exactly as a server without the cache does.
//
// With thinking on, this model writes its answer inside the open think block and ends the turn without
// </think>; the template renders such an answer with an empty think block in front, which is not what the model
// generated, so the follow-up must fall back to the longest real prefix: the first turn's whole prompt.
TEST(Scheduler, FollowUpChatTurnResumesAtTheAnswerEnd) {
  const std::optional<std::string> src = text::chat_template_from_gguf(model().engine->model().file());
  ASSERT_TRUE(src);
  const text::ChatTemplate tpl(*src);
  ModelInfo info;
  info.id = "tiny";
  info.n_ctx = model().engine->n_ctx();
  for (bool thinking : {false, true}) {
    SCOPED_TRACE(thinking ? "thinking" : "no thinking");
    text::TurnCache turns;  // as the server has: the follow-up starts from the first turn's prompt pieces
    const ApiContext ctx{*model().tok, &tpl, info, "none", &turns};
    SchedulerOptions so;
    so.cache_bytes = size_t{64} << 20;
    Scheduler cached(*model().engine, *model().tok, so);
    so.cache_bytes = 0;
    Scheduler uncached(*model().engine, *model().tok, so);
    json body = {{"messages", json::array({{{"role", "user"}, {"content", "What does \"river\" mean?"}}})},
                 {"temperature", 0},
                 {"max_tokens", 160}};
    if (!thinking) body["chat_template_kwargs"] = {{"enable_thinking", false}};
    const ParsedRequest p1 = parse_chat_request(body, ctx);
    auto c1 = cached.submit(p1.gen);
    const Outcome t1 = drain(*c1);
    ASSERT_EQ(t1.finish, Finish::kStop) << t1.text;  // ended by the template's end of turn
    ASSERT_GE(t1.tokens.size(), 2u);
    body["messages"].push_back({{"role", "assistant"}, {"content", t1.text}});
    body["messages"].push_back({{"role", "user"}, {"content", "And the dark?"}});
    const ParsedRequest p2 = parse_chat_request(body, ctx);
    EXPECT_EQ(turns.hits(), 1);
    // What the first turn's sequence processed: its prompt and every answer token but the last (never fed).
    std::vector<int32_t> fed = p1.gen.prompt;
    fed.insert(fed.end(), t1.tokens.begin(), t1.tokens.end() - 1);
    ASSERT_GT(p2.gen.prompt.size(), fed.size() + 1);
    ASSERT_TRUE(std::equal(p1.gen.prompt.begin(), p1.gen.prompt.end(), p2.gen.prompt.begin()))
        << "turn 2 does not extend turn 1's prompt";
    if (thinking) {
      ASSERT_EQ(t1.text.find("</think>"), std::string::npos) << "premise: the think block stays open";
    }
    const bool at_answer_end = !thinking;
    EXPECT_EQ(std::equal(fed.begin(), fed.end(), p2.gen.prompt.begin()), at_answer_end);
    auto c2 = cached.submit(p2.gen);
    const Outcome t2 = drain(*c2);
    EXPECT_EQ(c2->n_cached(), static_cast<int64_t>(at_answer_end ? fed.size() : p1.gen.prompt.size()));
    auto u2 = uncached.submit(p2.gen);
    const Outcome o2 = drain(*u2);
    EXPECT_EQ(u2->n_cached(), 0);
    EXPECT_EQ(t2.tokens, o2.tokens);
    EXPECT_EQ(t2.text, o2.text);
  }
}

TEST(PrefixCache, LeastRecentlyUsedWithinBudget) {
  auto& e = *model().engine;
  auto snapshot = [&](int salt, int n) {
    auto st = e.new_sequence();
    std::vector<int32_t> toks = prompt_of(n, salt);
    e.eval(*st, toks);
    return std::make_pair(toks, std::move(st));
  };
  auto [t1, s1] = snapshot(1, 20);
  PrefixCache probe(size_t{1} << 30);
  probe.insert(t1, *s1);
  const size_t one = probe.stats().bytes;
  ASSERT_GT(one, 0u);
  PrefixCache cache(one * 5 / 2);  // room for two
  auto [t2, s2] = snapshot(2, 20);
  auto [t3, s3] = snapshot(3, 20);
  cache.insert(t1, *s1);
  cache.insert(t2, *s2);
  std::vector<int32_t> longer = t1;
  longer.push_back(5);
  auto fresh = e.new_sequence();
  EXPECT_EQ(cache.restore(longer, *fresh), 20);  // t1 is now the most recently used
  EXPECT_EQ(fresh->n_past(), 20);
  cache.insert(t3, *s3);                          // evicts t2
  EXPECT_TRUE(cache.contains(t1));
  EXPECT_FALSE(cache.contains(t2));
  EXPECT_TRUE(cache.contains(t3));
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_LE(cache.stats().bytes, cache.stats().budget);
  auto other = e.new_sequence();
  EXPECT_EQ(cache.restore(t1, *other), 0);        // a whole prompt is never a hit: one token must remain
  PrefixCache tiny(one / 2);  // a snapshot over the budget is not kept
  tiny.insert(t1, *s1);
  EXPECT_EQ(tiny.stats().entries, 0);
}

// Log-probabilities: one entry per generated token (end token excluded), log-softmax of the logits; greedy tokens
// are their own most likely alternative.
TEST(Scheduler, Logprobs) {
  SchedulerOptions so;
  Scheduler s(*model().engine, *model().tok, so);
  GenRequest r = request(12, 4, 10);
  r.top_logprobs = 3;
  auto c = s.submit(r);
  std::string text;
  std::vector<TokenLogprob> lps;
  while (!c->wait(&text, std::chrono::milliseconds(200), &lps)) {}
  ASSERT_EQ(lps.size(), c->tokens().size());
  for (size_t i = 0; i < lps.size(); ++i) {
    EXPECT_EQ(lps[i].id, c->tokens()[i]);
    ASSERT_EQ(lps[i].top.size(), 3u);
    EXPECT_EQ(lps[i].top[0].first, lps[i].id);
    EXPECT_EQ(lps[i].top[0].second, lps[i].logprob);
    EXPECT_LE(lps[i].logprob, 0.0f);
    EXPECT_GE(lps[i].top[0].second, lps[i].top[1].second);
    EXPECT_GE(lps[i].top[1].second, lps[i].top[2].second);
    double p = 0;
    for (const auto& t : lps[i].top) p += std::exp(t.second);
    EXPECT_LE(p, 1.0 + 1e-5);
  }
  // The same request without log-probabilities gives the same tokens and none.
  r.top_logprobs = -1;
  auto c2 = s.submit(r);
  std::vector<TokenLogprob> none;
  text.clear();
  while (!c2->wait(&text, std::chrono::milliseconds(200), &none)) {}
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(c2->tokens(), c->tokens());
}

// Log-probabilities are the model's, before the JSON mask (the docs: before the sampling filters): at the first
// position the top entry is the token the unconstrained greedy answer starts with, not the masked choice.
TEST(Scheduler, LogprobsAreTakenBeforeTheJsonMask) {
  Scheduler s(*model().engine, *model().tok, SchedulerOptions{});
  GenRequest r;
  r.prompt = model().tok->encode("<|im_start|>user\nGive me a JSON object.<|im_end|>\n<|im_start|>assistant\n", true);
  r.max_tokens = 4;
  r.sampling.temperature = 0;
  const Outcome free = drain(*s.submit(r));
  r.json_object = true;
  r.top_logprobs = 2;
  auto c = s.submit(r);
  std::string text;
  std::vector<TokenLogprob> lps;
  while (!c->wait(&text, std::chrono::milliseconds(200), &lps)) {}
  ASSERT_FALSE(free.tokens.empty());
  ASSERT_FALSE(lps.empty());
  ASSERT_NE(lps[0].id, free.tokens[0]) << "premise: the model's favourite first token is not JSON";
  EXPECT_EQ(lps[0].top[0].first, free.tokens[0]);
  EXPECT_LT(lps[0].logprob, lps[0].top[0].second);
}

// Issue 8 in the server: an engine streaming its experts through a 3-per-layer cache serves batched requests with
// exactly the mapped engine's outputs, and the scheduler's stats (what /metrics exports) carry the cache counters.
TEST(Scheduler, StreamedExpertsSameOutputAndCounters) {
  runtime::EngineOptions o;
  o.model_path = kModel;
  o.n_ctx = 256;
  o.threads = 1;
  o.expert_cache = 3;
  runtime::Engine streamed(o);
  std::vector<GenRequest> reqs = {request(12, 21, 10), request(40, 22, 8, true), request(7, 23, 12)};
  SchedulerOptions so;
  so.parallel = 3;
  std::vector<Outcome> want, got;
  {
    Scheduler s(*model().engine, *model().tok, so);
    std::vector<std::shared_ptr<Completion>> cs;
    for (const auto& r : reqs) cs.push_back(s.submit(r));
    for (auto& c : cs) want.push_back(drain(*c));
    EXPECT_EQ(s.stats().expert_slots, 0);
    EXPECT_EQ(s.stats().experts.misses, 0u);
  }
  Scheduler s(streamed, *model().tok, so);
  std::vector<std::shared_ptr<Completion>> cs;
  for (const auto& r : reqs) cs.push_back(s.submit(r));
  for (auto& c : cs) got.push_back(drain(*c));
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  settle(s);
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.expert_slots, 3);
  EXPECT_GT(st.experts.misses, 0u);
  EXPECT_GT(st.experts.hits, 0u);
  EXPECT_EQ(st.experts.hits + st.experts.misses,
            streamed.model().expert_stats().hits + streamed.model().expert_stats().misses);
}

// Speculative decoding inside continuous batching: a model with an MTP block drafts per sequence (the default);
// eight greedy requests at once, prompts chunked across steps, with and without the prefix cache (a follow-up turn
// resumes from a snapshot), give exactly the tokens the same model gives without drafting, one request at a time.
// With a q4_0 cache (sink 4, window 16: the shadow gives pages back within these prompts) the same holds against
// the q4_0 cache without drafting: a quantized cache keeps drafting, rollback and the prefix cache exact.
class SchedulerKv : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Kv, SchedulerKv, ::testing::Values("f16", "q4_0"));
TEST_P(SchedulerKv, DraftingInABatchOfEightEqualsNoDrafting) {
  const std::string mtp = TERN_FIXTURES_DIR "/models/q35-mtp.bf16.gguf";
  auto engine_for = [&](bool spec) {
    runtime::EngineOptions o;
    o.model_path = mtp;
    o.n_ctx = 256;
    o.threads = 1;
    o.no_spec = !spec;
    o.kv_type = GetParam();
    if (GetParam() != "f16") {
      o.kv_sink = 4;
      o.kv_window = 16;
    }
    return std::make_unique<runtime::Engine>(o);
  };
  auto plain = engine_for(false), spec = engine_for(true);
  ASSERT_TRUE(spec->decoder().drafting());
  ASSERT_FALSE(plain->decoder().drafting());
  const text::Tokenizer tok(text::tokenizer_data_from_gguf(spec->model().file()));
  std::vector<GenRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    GenRequest r;
    for (int t = 0; t < 9 + 8 * i; ++t) r.prompt.push_back((t * 37 + i * 101 + 5) % 390 + 1);
    r.max_tokens = 24;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    reqs.push_back(r);
  }
  std::vector<Outcome> want;
  {
    SchedulerOptions so;
    so.parallel = 1;
    so.batch = 16;
    Scheduler s(*plain, tok, so);
    for (const auto& r : reqs) want.push_back(drain(*s.submit(r)));
  }
  for (int with_cache = 0; with_cache < 2; ++with_cache) {
    SchedulerOptions so;
    so.parallel = 8;
    so.batch = 16;
    so.cache_bytes = with_cache ? size_t{64} << 20 : 0;
    Scheduler s(*spec, tok, so);
    std::vector<std::shared_ptr<Completion>> cs;
    for (const auto& r : reqs) cs.push_back(s.submit(r));
    for (size_t i = 0; i < reqs.size(); ++i) {
      Outcome o = drain(*cs[i]);
      EXPECT_EQ(o.tokens, want[i].tokens) << "request " << i << (with_cache ? ", cache on" : "");
      EXPECT_EQ(o.text, want[i].text) << "request " << i;
    }
    if (with_cache) {  // a second turn on request 3: resumes from the end of its answer, still the same tokens
      GenRequest r2 = reqs[3];
      r2.prompt.insert(r2.prompt.end(), want[3].tokens.begin(), want[3].tokens.end() - 1);
      for (int t = 0; t < 7; ++t) r2.prompt.push_back(t * 11 + 3);
      auto c2 = s.submit(r2);
      Outcome o2 = drain(*c2);
      EXPECT_GT(c2->n_cached(), static_cast<int64_t>(reqs[3].prompt.size()));
      SchedulerOptions one;
      one.parallel = 1;
      Scheduler p(*plain, tok, one);
      EXPECT_EQ(o2.tokens, drain(*p.submit(r2)).tokens) << "follow-up turn from the prefix cache";
    }
    settle(s);
    EXPECT_GT(s.stats().draft.steps, 0);
    EXPECT_GT(s.stats().draft.drafted, 0) << "the MTP block drafted";
  }
}

namespace {

// A shared KV budget (--parallel auto when fewer sequences fit whole): a request reserves prompt + max_tokens
// (+ drafts) rows; the queue's first request waits until its rows fit, whatever sequences are free, and runs to the
// same tokens as alone; one that can never fit is refused at submit.
TEST(Scheduler, KvBudgetAdmitsByTokens) {
  Scheduler alone(*model().engine, *model().tok, SchedulerOptions{});
  const GenRequest a = request(40, 21, 200), b = request(30, 22, 40);  // a runs long: b is submitted while it runs
  const Outcome want_a = drain(*alone.submit(a)), want_b = drain(*alone.submit(b));
  SchedulerOptions so;
  so.parallel = 4;
  Scheduler s(*model().engine, *model().tok, so);  // kv_rows() needs a scheduler; the limit comes next
  const int64_t ra = s.kv_rows(a), rb = s.kv_rows(b);
  EXPECT_EQ(ra, std::min<int64_t>(256, 40 + 200 + model().engine->decoder().max_draft()));
  so.kv_tokens = ra + rb - 1;  // either alone fits, both at once do not
  Scheduler tight(*model().engine, *model().tok, so);
  auto ca = tight.submit(a);
  auto cb = tight.submit(b);
  const Outcome got_a = drain(*ca), got_b = drain(*cb);
  EXPECT_EQ(got_a.tokens, want_a.tokens);
  EXPECT_EQ(got_b.tokens, want_b.tokens);
  settle(tight);
  const SchedulerStats st = tight.stats();
  EXPECT_EQ(st.kv_waits, 1);  // b waited for a's rows although three sequences were free
  EXPECT_EQ(st.kv_reserved, 0);
  EXPECT_EQ(st.kv_tokens, ra + rb - 1);
  so.kv_tokens = 100;  // a request that fits the context but never the KV budget is refused at once
  Scheduler small(*model().engine, *model().tok, so);
  try {
    small.submit(request(40, 23, 80));
    ADD_FAILURE() << "expected an AdmissionError";
  } catch (const AdmissionError& e) {
    EXPECT_NE(std::string(e.what()).find("tokens of KV cache"), std::string::npos) << e.what();
  }
}

// A sequence's KV rows go back to the system when asked (SequenceState::release_rows): the process's resident set
// falls by about the bytes the rows took.
TEST(SequenceStateMemory, ReleasedRowsLeaveTheResidentSet) {
  models::Model& m = model().engine->model();
  models::SequenceState st(m.backend(), m.state_shape(), 1 << 16, ops::KvType::kF16);
  size_t kv = 0;
  for (int64_t i = 0; i < st.n_layer(); ++i) {
    models::LayerState& l = st.layer(i);
    for (auto* buf : {l.k.get(), l.v.get()}) {
      if (!buf) continue;
      std::vector<uint8_t> ones(buf->bytes(), 1);
      buf->write(0, ones.data(), ones.size());  // every page touched
      kv += buf->bytes();
    }
  }
  ASSERT_GT(kv, size_t{16} << 20) << "a state big enough to measure";
  const uint64_t before = runtime::resident_set().now;
  st.release_rows(0);
  const uint64_t after = runtime::resident_set().now;
  EXPECT_GE(before - std::min(before, after), kv * 9 / 10) << "resident " << before << " -> " << after << ", KV " << kv;
}

}  // namespace
