// `tern plan -m MODEL [-c CTX] [--parallel K] [--mem-budget SIZE] [--ranks N] [--json]`: the memory plan before loading
// anything (only the GGUF header is read): weights resident vs streamed, expert cache, state, buffers, and
// whether it fits. The engine sizes its real allocations from the same plan (runtime/memory_plan).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/model_options.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "models/registry.h"
#include "runtime/engine.h"
#include "runtime/memory_plan.h"

namespace tern::cli {

static RunFn setup_plan(CLI::App& app) {
  struct Opts {
    runtime::EngineOptions engine;
    std::string parallel = "1";
    int64_t batch = runtime::kMaxBatchRows;
    bool json = false;
    int ranks = 1;
  };
  auto o = std::make_shared<Opts>();
  add_model_option(app, o->engine, ModelArg::kRequired);
  add_memory_options(app, o->engine);
  add_draft_options(app, o->engine);
  app.add_option("--parallel", o->parallel, "Sequences held at once (tern serve --parallel; auto: as many as fit)")
      ->capture_default_str();
  app.add_option("-b,--batch", o->batch, "Rows of the largest forward")->capture_default_str();
  app.add_flag("--json", o->json, "Print the plan as one JSON object (bytes)");
  app.add_option("--ranks", o->ranks,
                 "Plan one rank's share of the model split over N processes (mpirun -np N; each on its own machine)")
      ->capture_default_str();
  return [o] {
    const runtime::EngineOptions& e = o->engine;
    int parallel = parse_parallel(o->parallel);  // 0: auto
    if (o->batch < 1) fail("-b/--batch must be >= 1 (got %lld)", static_cast<long long>(o->batch));
    const runtime::CheckedOptions checked = runtime::check_options(e);
    const ops::KvConfig& kv = checked.kv;
    const uint64_t budget = checked.budget;

    const gguf::File f = gguf::File::open(e.model_path);
    if (o->ranks < 1) fail("--ranks must be >= 1 (got %d)", o->ranks);
    auto m = models::describe_model(f);
    if (o->ranks > 1) {
      auto r = m->rank_shape(o->ranks);
      if (!r) fail("%s: %s does not split across ranks", e.model_path.c_str(), m->info().arch.c_str());
      m = std::move(r);
    }
    runtime::MemoryRequest req;
    req.n_ctx = e.n_ctx > 0 ? e.n_ctx : runtime::default_n_ctx(*m, kv, std::max(parallel, 1), budget);
    const int64_t checkpoints = runtime::draft_checkpoints(*m, e.draft, e.no_spec);  // the default --draft when it drafts
    if (parallel == 0) {
      const runtime::AutoParallel a = runtime::auto_parallel(*m, kv, req.n_ctx, checkpoints, budget);
      parallel = a.n;
      req.kv_tokens = a.kv_tokens;
    }
    req.n_parallel = parallel;
    req.kv = kv;
    req.batch_rows = o->batch;
    req.budget = budget;
    req.expert_slots = e.expert_cache;
    req.repack = !e.no_repack;
    req.checkpoints = checkpoints;
    const runtime::MemoryPlan p = runtime::plan_memory(*m, req);
    if (o->json) {
      nlohmann::ordered_json j = {
          {"model", e.model_path}, {"ranks", o->ranks}, {"file_bytes", p.file_bytes}, {"n_ctx", req.n_ctx}, {"parallel", parallel}, {"kv_tokens", req.kv_tokens},
          {"kv", runtime::kv_description(kv)},
          {"dense", p.dense}, {"experts", p.experts}, {"streamed", p.streamed}, {"expert_slots", p.slots},
          {"n_expert", p.n_expert}, {"expert_cache", p.expert_cache}, {"state", p.state}, {"buffers", p.buffers},
          {"checkpoints", p.checkpoints}, {"runtime", p.runtime}, {"total", p.total()}, {"minimum", p.minimum()}, {"budget", p.budget},
          {"repacked", p.repacked}, {"fits", p.fits}, {"verdict", p.verdict}};
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      const std::string shared =
          req.kv_tokens > 0 ? strf(", sharing %lld tokens of KV", static_cast<long long>(req.kv_tokens)) : "";
      const std::string ranks = o->ranks > 1 ? strf(", one rank of %d (each on its own machine)", o->ranks) : "";
      std::printf("memory plan for %s (context %lld x %d sequence%s%s, %s KV%s):\n%s", e.model_path.c_str(),
                  static_cast<long long>(req.n_ctx), parallel, parallel > 1 ? "s" : "", shared.c_str(),
                  runtime::kv_description(kv).c_str(), ranks.c_str(), runtime::format_plan(p).c_str());
    }
    return p.fits ? 0 : 1;
  };
}

TERN_COMMAND(plan, "plan", "Print the memory plan for a model (weights, expert cache, state) before loading it",
             setup_plan);

}  // namespace tern::cli
