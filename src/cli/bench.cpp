// `tern bench -m MODEL [-p 512] [-n 128] [-d 0[,512...]] [-t THREADS] [-r REPS] [--json] [--profile]`: measures a
// model the way llama-bench does: `pp<N>` processes an N-token prompt in one batch, `tg<N>` generates N tokens one
// at a time; with a depth D > 0 the sequence first holds a D-token prompt (not timed) and the test is named
// `pp<N> @ d<D>` / `tg<N> @ d<D>`. Each test is repeated REPS times (after one warm-up) and reported as mean and
// standard deviation of tok/s. Token ids are drawn at random (seeded). --json prints one JSON array (a contract
// outside checks rely on): objects with test, n_prompt, n_gen, n_depth, threads, tok_s_mean, tok_s_stddev.
// --profile then times one more tg run op by op (core/profile.h) against the memory read bandwidth.
// With a model that drafts (an MTP block, not --no-spec), tgN generates N tokens greedily through the decode loop
// (drafts verified, as `tern run` does), so it measures speculative decoding; the JSON objects then also carry
// draft_acceptance and tokens_per_step. Without drafting, tgN feeds random tokens one at a time, as llama-bench.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/model_options.h"
#include "core/error.h"
#include "core/log.h"
#include "core/membw.h"
#include "core/parallel.h"
#include "core/profile.h"
#include "runtime/sampler.h"

namespace tern::cli {

// llama-bench's test names: ppN, tgN, ppN+tgM, with " @ dD" when the test runs at a depth.
static std::string test_name(int np, int ng, int depth) {
  std::string s = ng == 0 ? "pp" + std::to_string(np)
                  : np == 0 ? "tg" + std::to_string(ng)
                            : "pp" + std::to_string(np) + "+tg" + std::to_string(ng);
  if (depth > 0) s += " @ d" + std::to_string(depth);
  return s;
}

static RunFn setup_bench(CLI::App& app) {
  struct Opts {
    runtime::EngineOptions engine;
    int n_prompt = 512, n_gen = 128, reps = 5;
    std::vector<int> depths{0};
    bool json = false, profile = false, spec_costs = false;
    double mem_bw = 0;
  };
  auto o = std::make_shared<Opts>();
  add_engine_options(app, o->engine);
  add_draft_options(app, o->engine);
  app.add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens for the pp test (0: skip)")->capture_default_str();
  app.add_option("-n,--n-gen", o->n_gen, "Generated tokens for the tg test (0: skip)")->capture_default_str();
  app.add_option("-d,--n-depth", o->depths,
                 "Prompt tokens already in the sequence before each test (comma-separated list; each depth runs "
                 "every test)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("-r,--repetitions", o->reps, "Repetitions of each test")->capture_default_str();
  app.add_flag("--json", o->json, "Print results as one JSON array");
  app.add_flag("--profile", o->profile,
               "Then time one tg run (-n tokens at the first depth) op by op: ms, bytes read and GB/s per token");
  app.add_flag("--spec-costs", o->spec_costs,
               "Then measure speculative decoding's costs on this machine: a verify forward of 1 + k tokens "
               "(k = 0..4) and one draft step of the MTP block (-r repetitions each, at the first depth), and the "
               "decode speed-up they imply at per-token acceptance 0.6, 0.8 and 0.9");
  app.add_option("--mem-bw", o->mem_bw,
                 "Memory read bandwidth in GB/s for --profile's roofline column (0: measure it, ~2 s)")
      ->capture_default_str();
  return [o] {
    if (o->n_prompt < 0 || o->n_gen < 0) fail("-p and -n must be >= 0");
    if (o->reps < 1) fail("-r must be >= 1 (got %d)", o->reps);
    if (o->depths.empty()) fail("-d needs at least one depth");
    for (int d : o->depths)
      if (d < 0) fail("-d: depths must be >= 0 (got %d)", d);
    if (o->profile && o->json) fail("--profile prints a table; use it without --json");
    if (o->spec_costs && o->json) fail("--spec-costs prints a table; use it without --json");
    if (o->profile && o->n_gen == 0) fail("--profile times a tg run: -n must be > 0");
    if (o->mem_bw < 0 || !std::isfinite(o->mem_bw)) fail("--mem-bw must be a bandwidth in GB/s >= 0");
    const int max_depth = *std::max_element(o->depths.begin(), o->depths.end());
    if (o->engine.n_ctx == 0) o->engine.n_ctx = max_depth + std::max(o->n_prompt, o->n_gen) + 1;
    runtime::Engine engine(o->engine);
    const int64_t V = engine.info().n_vocab;
    // Across ranks the forwards return each rank's own logits columns (the rows are not used here, as in
    // llama-bench); a decode step then ends with the reduction a greedy step needs instead of a gather of the rows.
    models::LocalLogits local(engine.model());
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(V - 1));
    auto seq = engine.new_sequence();
    auto decode_one = [&](int32_t tok) {
      const std::vector<float>& lg = engine.eval(*seq, {tok});
      const models::LogitsShare sh = engine.model().logits_share();
      if (sh.comm) runtime::argmax(runtime::LogitsRow{lg.data(), V, sh.first, sh.count, sh.comm});
    };
    using clock = std::chrono::steady_clock;
    auto random_tokens = [&](int n) {
      std::vector<int32_t> toks(n);
      for (auto& t : toks) t = pick(rng);
      return toks;
    };
    auto start_at = [&](int depth) {  // a fresh sequence holding `depth` prompt tokens
      seq->reset();
      if (depth > 0) engine.eval(*seq, random_tokens(depth));
    };
    auto run_pp = [&](int depth) {
      start_at(depth);
      const std::vector<int32_t> toks = random_tokens(o->n_prompt);
      auto t0 = clock::now();
      engine.eval(*seq, toks);
      return o->n_prompt / std::chrono::duration<double>(clock::now() - t0).count();
    };
    runtime::DecodeLoop& loop = engine.decoder();
    auto run_tg = [&](int depth) {
      start_at(depth);
      auto t0 = clock::now();
      if (!loop.drafting()) {
        for (int i = 0; i < o->n_gen; ++i) decode_one(pick(rng));
      } else {  // greedy generation through the decode loop: drafts verified
        runtime::DecodeSeq ds;
        ds.state = seq.get();
        std::vector<runtime::DecodeSeq*> one = {&ds};
        int n = 0;
        int32_t last = pick(rng);
        auto take = [&](size_t, const runtime::LogitsRow& logits, int32_t) {
          last = runtime::argmax(logits);
          if (++n >= o->n_gen) ds.stopped = true;
          return last;
        };
        while (n < o->n_gen) {
          ds.feed = {last};
          ds.sample = true;
          loop.step(one, take);
        }
      }
      return o->n_gen / std::chrono::duration<double>(clock::now() - t0).count();
    };
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    auto measure = [&](int np, int ng, int depth, auto fn) {
      const std::string name = test_name(np, ng, depth);
      fn(depth);  // warm-up: page in the weights, size the scratch buffers
      std::vector<double> v;
      for (int r = 0; r < o->reps; ++r) v.push_back(fn(depth));
      double mean = 0, var = 0;
      for (double x : v) mean += x;
      mean /= v.size();
      for (double x : v) var += (x - mean) * (x - mean);
      const double sd = v.size() > 1 ? std::sqrt(var / (v.size() - 1)) : 0.0;
      out.push_back({{"test", name}, {"n_prompt", np}, {"n_gen", ng}, {"n_depth", depth}, {"threads", n_threads()},
                     {"tok_s_mean", mean}, {"tok_s_stddev", sd}, {"reps", o->reps}, {"model", o->engine.model_path}});
      if (ng > 0 && loop.drafting()) {
        out.back()["draft_acceptance"] = loop.stats().acceptance();
        out.back()["tokens_per_step"] = loop.stats().tokens_per_step();
      }
      if (!o->json)
        std::printf("| %-40s | %14s | %7d | %10.2f ± %.2f |\n", o->engine.model_path.c_str(), name.c_str(),
                    n_threads(), mean, sd);
    };
    if (!o->json) std::printf("| %-40s | %14s | %7s | %18s |\n", "model", "test", "threads", "tok/s");
    for (int depth : o->depths) {
      if (o->n_prompt > 0) measure(o->n_prompt, 0, depth, run_pp);
      if (o->n_gen > 0) measure(0, o->n_gen, depth, run_tg);
    }
    if (o->json) std::printf("%s\n", out.dump(2).c_str());
    if (o->spec_costs) {
      models::Model& m = engine.model();
      if (!m.can_draft()) fail("--spec-costs: %s has no MTP block tern drafts with", o->engine.model_path.c_str());
      constexpr int kMaxK = 4;
      start_at(std::max(o->depths.front(), 1));
      seq->set_checkpoint_capacity(m.backend(), kMaxK + 1);
      std::vector<double> tv(kMaxK + 1, 0.0);
      std::vector<models::SeqInput> b(1);
      b[0].state = seq.get();
      b[0].all_logits = true;
      b[0].hidden = true;
      std::vector<float> h;
      for (int rep = -1; rep < o->reps; ++rep) {  // rep -1: warm-up
        for (int k = 0; k <= kMaxK; ++k) {
          if (seq->n_past() + k + 1 >= seq->n_ctx()) fail("--spec-costs: raise -c");
          b[0].tokens = random_tokens(k + 1);
          const int64_t base = seq->n_past();
          auto t0 = clock::now();
          m.forward(b);
          if (rep >= 0) tv[k] += std::chrono::duration<double>(clock::now() - t0).count() / o->reps;
          h.assign(m.hidden().end() - engine.info().n_embd, m.hidden().end());
          seq->rollback(base + 1);  // as a verify that kept its first token
        }
      }
      std::vector<models::DraftInput> d(1);
      d[0].state = seq.get();
      double td = 0;
      for (int rep = -1; rep < o->reps; ++rep) {
        d[0].tokens = random_tokens(1);
        d[0].hidden = h;
        auto t0 = clock::now();
        m.forward_draft(d);
        if (rep >= 0) td += std::chrono::duration<double>(clock::now() - t0).count() / o->reps;
        h = m.hidden();
      }
      std::printf("\nspeculative decoding costs (%s, %d threads, %d repetitions; one draft step %.2f ms = %.2fx a "
                  "1-token forward):\n", o->engine.model_path.c_str(), n_threads(), o->reps, td * 1e3, td / tv[0]);
      std::printf("| k | verify 1+k ms | / 1-token | implied speed-up at acceptance 0.6 | 0.8 | 0.9 |\n");
      std::printf("|---:|---:|---:|---:|---:|---:|\n");
      for (int k = 0; k <= kMaxK; ++k) {
        std::printf("| %d | %.2f | %.2f |", k, tv[k] * 1e3, tv[k] / tv[0]);
        for (double a : {0.6, 0.8, 0.9}) {
          const double tokens = (1.0 - std::pow(a, k + 1)) / (1.0 - a);  // 1 + a + ... + a^k per step
          std::printf(" %.2f |", tokens * tv[0] / (tv[k] + k * td));
        }
        std::printf("\n");
      }
      std::printf("(speed-up = expected tokens per step x t(1 token) / (t(verify 1+k) + k x t(draft step)); the "
                  "first draft forward of a step also writes the kept tokens' rows, not counted)\n");
    }
    if (!o->profile) return 0;

    // One more tg run with the op timers on (the tests above warmed everything up).
    double bw = o->mem_bw;
    if (bw == 0) {
      bw = measure_read_bandwidth(n_threads(), size_t(1) << 30, 5).best_gbs;
      log::info("profile: measured memory read bandwidth %.2f GB/s (%d threads, best of 5 reads of 1 GiB)", bw,
                n_threads());
    }
    const int depth = o->depths.front();
    start_at(depth);
    profile::reset();
    profile::set_enabled(true);
    auto t0 = clock::now();
    for (int i = 0; i < o->n_gen; ++i) decode_one(pick(rng));
    const double total = std::chrono::duration<double>(clock::now() - t0).count();
    profile::set_enabled(false);
    const double per = 1.0 / o->n_gen;
    std::printf("\nprofile: %s, %s, %d threads, memory read bandwidth %.2f GB/s\n", o->engine.model_path.c_str(),
                test_name(0, o->n_gen, depth).c_str(), n_threads(), bw);
    std::printf("| %-14s | %9s | %10s | %6s | %12s | %8s | %9s |\n", "op", "calls/tok", "ms/tok", "time", "MB read/tok",
                "GB/s", "of bw");
    std::printf("|%s|%s|%s|%s|%s|%s|%s|\n", std::string(16, '-').c_str(), std::string(11, '-').c_str(),
                std::string(12, '-').c_str(), std::string(8, '-').c_str(), std::string(14, '-').c_str(),
                std::string(10, '-').c_str(), std::string(11, '-').c_str());
    auto row = [&](const std::string& name, double calls, double sec, double bytes) {
      const double ms = sec * per * 1e3, mb = bytes * per * 1e-6;
      char gbs[32] = "-", frac[32] = "-";
      if (bytes > 0 && sec > 0) {
        std::snprintf(gbs, sizeof gbs, "%.2f", bytes / sec * 1e-9);
        std::snprintf(frac, sizeof frac, "%.0f%%", 100.0 * bytes / sec * 1e-9 / bw);
      }
      std::printf("| %-14s | %9s | %10.3f | %5.1f%% | %12.2f | %8s | %9s |\n", name.c_str(),
                  calls > 0 ? std::to_string(static_cast<int64_t>(std::lround(calls * per))).c_str() : "",
                  ms, 100.0 * sec / total, mb, gbs, frac);
    };
    double sum_s = 0, sum_b = 0;
    for (const profile::Entry& e : profile::snapshot()) {
      row(e.name, static_cast<double>(e.calls), e.seconds, static_cast<double>(e.bytes));
      sum_s += e.seconds;
      sum_b += static_cast<double>(e.bytes);
    }
    row("other", 0, std::max(0.0, total - sum_s), 0);
    row("token", 0, total, sum_b);
    std::printf("floor (bytes read / bandwidth): %.3f ms/token; measured %.3f ms/token (%.0f%% of the roofline)\n",
                sum_b * per / (bw * 1e9) * 1e3, total * per * 1e3, 100.0 * (sum_b / (bw * 1e9)) / total);
    return 0;
  };
}

TERN_COMMAND(bench, "bench", "Measure prompt processing and generation speed (like llama-bench)", setup_bench);

}  // namespace tern::cli
