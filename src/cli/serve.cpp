// `tern serve -m MODEL`: an OpenAI- and Anthropic-compatible HTTP server with continuous batching (see docs/SERVE.md).
// SIGINT / SIGTERM stop it gracefully: new generation requests get 503 while the running ones finish (for at most
// --shutdown-grace seconds, then they are cancelled); a second signal cancels at once; the exit status is 0.
#include <pthread.h>
#include <signal.h>

#include <ctime>

#include <filesystem>
#include <thread>

#include "cli/model_options.h"
#include "cli/text_model.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "models/expert_store.h"
#include "runtime/memory_plan.h"
#include "serve/scheduler.h"
#include "serve/server.h"
#include "text/chat_template.h"

namespace tern::cli {

namespace {

struct ServeOptions {
  runtime::EngineOptions engine;
  serve::SchedulerOptions sched;
  serve::ServerOptions server;
  std::vector<std::string> aliases;
  bool any_model = false;
  int64_t cache_mib = 512;
  std::string parallel = "4";
  double shutdown_grace = 30;
  int64_t fault_expert_read = 0;
};

// Threads started before serve blocked its signals (an MPI library's, under mpirun) would take SIGINT / SIGTERM
// with the default action (the process ends without draining): a handler hands them to the waiting thread instead.
pthread_t g_waiter;
void to_waiter(int sig) { pthread_kill(g_waiter, sig); }

}  // namespace

static RunFn setup_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  add_engine_options(app, o->engine);
  add_draft_options(app, o->engine);
  app.add_option("--host", o->server.host,
                 "Address to listen on (loopback by default; another address without --api-key is warned about)")
      ->capture_default_str();
  app.add_option("--port", o->server.port, "Port to listen on (0: any free port, logged)")->capture_default_str();
  app.add_option("--api-key", o->server.api_key,
                 "Require 'Authorization: Bearer KEY' or 'x-api-key: KEY' on every route but / and /health (else 401)");
  app.add_option("--alias", o->aliases,
                 "Another name the 'model' field accepts, listed in /v1/models after the id (the file name without "
                 ".gguf); repeatable")
      ->allow_extra_args(false);
  app.add_flag("--any-model", o->any_model,
               "Accept any name in the 'model' field (for clients that hard-code one; else an unknown name is a 404)");
  app.add_option("--parallel", o->parallel,
                 "Sequences decoded together, each holding a full context; auto: as many as fit in half the available "
                 "memory (a quarter of --mem-budget), at most 64")
      ->capture_default_str();
  app.add_option("-b,--batch", o->sched.batch, "Most prompt tokens processed per step (prefill chunk)")
      ->capture_default_str();
  app.add_option("--max-queue", o->sched.max_queue, "Requests that may wait for a free sequence (more get 503)")
      ->capture_default_str();
  app.add_option("--reasoning-format", o->server.reasoning_format,
                 "Default for requests: none (the answer as generated) or auto (text before </think> of a think block "
                 "the prompt opened goes to reasoning_content)")
      ->capture_default_str();
  app.add_option("--cache-mib", o->cache_mib, "Prefix-cache budget in MiB (0: off)")->capture_default_str();
  app.add_option("--http-threads", o->server.http_threads, "HTTP worker threads (0: max(64, 8 x --parallel))")
      ->capture_default_str();
  app.add_option("--shutdown-grace", o->shutdown_grace,
                 "Seconds SIGTERM/SIGINT lets running requests finish (new ones get 503) before cancelling them")
      ->capture_default_str();
  // Testing only (fault tests of expert streaming): not listed in --help.
  app.add_option("--fault-expert-read", o->fault_expert_read,
                 "Testing: make the Nth expert read from the file fail (with --mem-budget / --expert-cache)")
      ->group("");
  return [o] {
    // Signals go to one waiting thread (blocked here, before any other thread exists, so every thread inherits it).
    // Across ranks only rank 0 serves HTTP and takes signals; the others follow its scheduler (serve/scheduler.h)
    // and keep the default actions, so that mpirun can end them.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    if (world().rank() == 0) pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client that left must not end the server; writes fail with EPIPE instead

    o->sched.parallel = parse_parallel(o->parallel);  // 0: auto
    if (o->cache_mib < 0) fail("--cache-mib must be >= 0 (got %lld)", static_cast<long long>(o->cache_mib));
    if (!(o->shutdown_grace >= 0) || o->shutdown_grace > 86400)
      fail("--shutdown-grace must be in [0, 86400] seconds (got %g)", o->shutdown_grace);
    if (o->fault_expert_read < 0) fail("--fault-expert-read must be >= 0");
    if (o->fault_expert_read > 0) {
      log::warn("--fault-expert-read %lld: expert read %lld will fail (a fault test)",
                static_cast<long long>(o->fault_expert_read), static_cast<long long>(o->fault_expert_read));
      models::ExpertStore::fail_read_for_testing(static_cast<uint64_t>(o->fault_expert_read));
    }
    o->sched.cache_bytes = static_cast<size_t>(o->cache_mib) << 20;
    o->engine.n_parallel = o->sched.parallel;  // the memory plan and the default context hold this many sequences
    o->engine.batch_rows = o->sched.batch + (o->sched.parallel ? o->sched.parallel : runtime::kMaxAutoParallel);
    o->engine.prefix_cache_bytes = o->sched.cache_bytes;
    TextModel tm(o->engine);
    std::unique_ptr<text::ChatTemplate> tpl;
    if (tm.chat_template) tpl = std::make_unique<text::ChatTemplate>(*tm.chat_template);
    else log::warn("%s has no chat template: /v1/chat/completions will refuse requests", o->engine.model_path.c_str());

    o->sched.parallel = tm.engine->n_parallel();  // auto resolved (and logged) by the engine
    o->sched.kv_tokens = tm.engine->kv_tokens();
    serve::Scheduler sched(*tm.engine, *tm.tokenizer, o->sched);
    if (sched.follower()) {  // until rank 0's server stops
      sched.wait();
      return 0;
    }
    serve::ModelInfo info;
    info.id = std::filesystem::path(o->engine.model_path).stem().string();
    for (const std::string& a : o->aliases)
      if (a.empty()) fail("--alias must not be empty");
    info.aliases = o->aliases;
    info.any_model = o->any_model;
    info.created = static_cast<int64_t>(std::time(nullptr));
    info.n_ctx = sched.n_ctx();
    info.n_ctx_train = tm.engine->info().n_ctx_train;
    info.n_vocab = tm.tokenizer->n_vocab();
    serve::Server server(o->server, sched, *tm.tokenizer, tpl.get(), info);

    // The first signal drains (on its own thread, so that a second signal can still be taken here and end the
    // wait); run() returns once the server has stopped.
    std::thread drainer;
    std::thread waiter([&] {
      int sig = 0;
      sigwait(&sigs, &sig);
      if (!server.port()) {  // not serving yet (or never will): nothing to drain
        server.stop();
        return;
      }
      log::info("signal %d: finishing %d running request(s) (at most %gs; new ones get 503; another signal cancels "
                "them now)", sig, server.in_flight(), o->shutdown_grace);
      drainer = std::thread([&] { server.drain(std::chrono::milliseconds(static_cast<int64_t>(o->shutdown_grace * 1000))); });
      sigwait(&sigs, &sig);
      server.force();
    });
    g_waiter = waiter.native_handle();
    struct sigaction sa {};
    sa.sa_handler = to_waiter;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    auto end_threads = [&] {
      sa.sa_handler = SIG_DFL;  // the waiter is about to go
      sigaction(SIGINT, &sa, nullptr);
      sigaction(SIGTERM, &sa, nullptr);
      pthread_kill(waiter.native_handle(), SIGTERM);  // wakes a waiter still in sigwait; no-op if it returned
      waiter.join();
      if (drainer.joinable()) drainer.join();
    };
    try {
      server.run();
    } catch (...) {
      end_threads();
      throw;
    }
    end_threads();
    return 0;
  };
}

TERN_COMMAND(serve, "serve", "OpenAI- and Anthropic-compatible HTTP server with continuous batching", setup_serve);

}  // namespace tern::cli
