// `tern run`: generate a continuation. With --tokens/--print-ids (a contract outside checks rely on) it reads
// token ids and prints the generated ids separated by single spaces on one line of stdout, nothing else.
#include <chrono>
#include <cstdio>

#include "cli/model_options.h"
#include "core/error.h"
#include "core/log.h"
#include "runtime/sampler.h"

namespace tern::cli {

static RunFn setup_run(CLI::App& app) {
  struct Opts {
    runtime::EngineOptions engine;
    runtime::SamplingParams sampling;
    std::string tokens;
    int n_predict = 128;
    bool print_ids = false;
  };
  auto o = std::make_shared<Opts>();
  add_engine_options(app, o->engine);
  app.add_option("--tokens", o->tokens, "Prompt as token ids, comma separated");
  app.add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str();
  app.add_flag("--print-ids", o->print_ids, "Print generated token ids instead of text");
  app.add_option("--temp", o->sampling.temperature, "Temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", o->sampling.top_k, "Top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", o->sampling.top_p, "Top-p (1: off)")->capture_default_str();
  app.add_option("--min-p", o->sampling.min_p, "Min-p (0: off)")->capture_default_str();
  app.add_option("--repeat-penalty", o->sampling.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  app.add_option("--presence-penalty", o->sampling.presence_penalty, "Presence penalty")->capture_default_str();
  app.add_option("--frequency-penalty", o->sampling.frequency_penalty, "Frequency penalty")->capture_default_str();
  app.add_option("--seed", o->sampling.seed, "Sampling seed")->capture_default_str();
  return [o] {
    if (o->n_predict < 0) fail("-n must be >= 0 (got %d)", o->n_predict);
    if (o->tokens.empty()) fail("tern run: give a prompt with --tokens (text prompts need a tokenizer: not yet)");
    if (!o->print_ids) fail("tern run --tokens needs --print-ids (text output needs a tokenizer: not yet)");
    std::vector<int32_t> prompt = runtime::parse_token_list(o->tokens);
    runtime::Sampler sampler(o->sampling);
    runtime::Engine engine(o->engine);
    auto seq = engine.new_sequence();
    if (static_cast<int64_t>(prompt.size()) + o->n_predict > engine.n_ctx())
      fail("prompt (%zu tokens) + %d to generate exceeds the context size %lld (raise -c)", prompt.size(),
           o->n_predict, static_cast<long long>(engine.n_ctx()));
    for (int32_t t : prompt) sampler.accept(t);
    const int64_t V = engine.config().n_vocab;
    auto t0 = std::chrono::steady_clock::now();
    const std::vector<float>* logits = &engine.eval(*seq, prompt);
    auto t1 = std::chrono::steady_clock::now();
    std::string line;
    for (int i = 0; i < o->n_predict; ++i) {
      int32_t tok = sampler.sample(logits->data(), V);
      sampler.accept(tok);
      line += (i ? " " : "") + std::to_string(tok);
      if (i + 1 < o->n_predict) logits = &engine.eval(*seq, {tok});
    }
    auto t2 = std::chrono::steady_clock::now();
    std::printf("%s\n", line.c_str());
    const double pp = std::chrono::duration<double>(t1 - t0).count(), tg = std::chrono::duration<double>(t2 - t1).count();
    log::info("prompt: %zu tokens, %.1f tok/s; generation: %d tokens, %.1f tok/s", prompt.size(), prompt.size() / pp,
              o->n_predict, o->n_predict > 1 ? (o->n_predict - 1) / tg : 0.0);
    return 0;
  };
}

TERN_COMMAND(run, "run", "Generate a continuation of a prompt", setup_run);

}  // namespace tern::cli
