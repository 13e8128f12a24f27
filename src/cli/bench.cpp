// `tern bench -m MODEL [-p 512] [-n 128] [-t THREADS] [-r REPS] [--json]`: measures a model the way llama-bench
// does: `pp<N>` processes an N-token prompt in one batch from an empty sequence, `tg<N>` generates N tokens one at
// a time from an empty sequence; each repeated REPS times (after one warm-up), reported as mean and standard
// deviation of tok/s. Token ids are drawn at random (seeded). --json prints one JSON array (a contract outside
// checks rely on): objects with test, n_prompt, n_gen, threads, tok_s_mean, tok_s_stddev.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/model_options.h"
#include "core/error.h"
#include "core/parallel.h"

namespace tern::cli {

static RunFn setup_bench(CLI::App& app) {
  struct Opts {
    runtime::EngineOptions engine;
    int n_prompt = 512, n_gen = 128, reps = 5;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  add_engine_options(app, o->engine);
  app.add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens for the pp test (0: skip)")->capture_default_str();
  app.add_option("-n,--n-gen", o->n_gen, "Generated tokens for the tg test (0: skip)")->capture_default_str();
  app.add_option("-r,--repetitions", o->reps, "Repetitions of each test")->capture_default_str();
  app.add_flag("--json", o->json, "Print results as one JSON array");
  return [o] {
    if (o->n_prompt < 0 || o->n_gen < 0) fail("-p and -n must be >= 0");
    if (o->reps < 1) fail("-r must be >= 1 (got %d)", o->reps);
    if (o->engine.n_ctx == 0) o->engine.n_ctx = std::max(o->n_prompt, o->n_gen) + 1;
    runtime::Engine engine(o->engine);
    const int64_t V = engine.config().n_vocab;
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(V - 1));
    auto seq = engine.new_sequence();
    using clock = std::chrono::steady_clock;
    auto run_pp = [&] {
      std::vector<int32_t> toks(o->n_prompt);
      for (auto& t : toks) t = pick(rng);
      seq->reset();
      auto t0 = clock::now();
      engine.eval(*seq, toks);
      return o->n_prompt / std::chrono::duration<double>(clock::now() - t0).count();
    };
    auto run_tg = [&] {
      seq->reset();
      auto t0 = clock::now();
      for (int i = 0; i < o->n_gen; ++i) engine.eval(*seq, {pick(rng)});
      return o->n_gen / std::chrono::duration<double>(clock::now() - t0).count();
    };
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    auto measure = [&](const std::string& name, int np, int ng, auto fn) {
      fn();  // warm-up: page in the weights, size the scratch buffers
      std::vector<double> v;
      for (int r = 0; r < o->reps; ++r) v.push_back(fn());
      double mean = 0, var = 0;
      for (double x : v) mean += x;
      mean /= v.size();
      for (double x : v) var += (x - mean) * (x - mean);
      const double sd = v.size() > 1 ? std::sqrt(var / (v.size() - 1)) : 0.0;
      out.push_back({{"test", name}, {"n_prompt", np}, {"n_gen", ng}, {"threads", n_threads()},
                     {"tok_s_mean", mean}, {"tok_s_stddev", sd}, {"reps", o->reps}, {"model", o->engine.model_path}});
      if (!o->json)
        std::printf("| %-40s | %7s | %7d | %10.2f ± %.2f |\n", o->engine.model_path.c_str(), name.c_str(), n_threads(),
                    mean, sd);
    };
    if (!o->json) std::printf("| %-40s | %7s | %7s | %18s |\n", "model", "test", "threads", "tok/s");
    if (o->n_prompt > 0) measure("pp" + std::to_string(o->n_prompt), o->n_prompt, 0, run_pp);
    if (o->n_gen > 0) measure("tg" + std::to_string(o->n_gen), 0, o->n_gen, run_tg);
    if (o->json) std::printf("%s\n", out.dump(2).c_str());
    return 0;
  };
}

TERN_COMMAND(bench, "bench", "Measure prompt processing and generation speed (like llama-bench)", setup_bench);

}  // namespace tern::cli
