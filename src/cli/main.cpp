// tern: one binary, subcommands registered by the files in cli/. Any tern::Error or bad flag ends the process
// with exit status 1 and one message on stderr.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>

#include "cli/command.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#ifdef TERN_MPI
#include "dist/mpi.h"
#endif

namespace tern::cli {
std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}
}  // namespace tern::cli

namespace {
// Commands that run across ranks (every rank runs the same command on the same input; rank 0 prints).
bool runs_across_ranks(const std::string& name) {
  for (const char* c : {"run", "chat", "serve", "bench", "logits", "perplexity", "info", "plan"})
    if (name == c) return true;
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace tern;
#ifdef TERN_MPI
  if (dist::launched_by_mpi()) dist::init_world(&argc, &argv);
#endif
  Comm& comm = world();
  // Any error ends the whole job: under mpirun a rank that fails takes the others down (never a hang at a
  // collective), and says which rank it was.
  auto failed = [&](const char* what) {
    if (comm.size() > 1) {
      std::fprintf(stderr, "tern: error: rank %d of %d: %s\n", comm.rank(), comm.size(), what);
      comm.abort(1);
    }
    std::fprintf(stderr, "tern: error: %s\n", what);
    return 1;
  };
  CLI::App app{"tern: inference engine for hybrid Mixture-of-Experts language models"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (-v, -q) also work after the subcommand
  app.set_version_flag("--version", "tern 0.1.0");
  bool verbose = false, quiet = false;
  app.add_flag("-v,--verbose", verbose, "Debug logging");
  app.add_flag("-q,--quiet", quiet, "Only errors on stderr");

  auto& cmds = cli::commands();
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<std::pair<CLI::App*, cli::RunFn>> runs;
  for (auto& c : cmds) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    runs.emplace_back(sub, c.setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "tern: error: %s (see tern --help)\n", e.what());
    return 1;
  }
  if (verbose) log::set_level(log::Level::kDebug);
  if (quiet) log::set_level(log::Level::kError);
  try {
    if (comm.size() > 1) {
      for (auto& [sub, run] : runs)
        if (sub->parsed() && !runs_across_ranks(sub->get_name()))
          fail("tern %s does not run across ranks yet (%d ranks): run, chat, serve, bench, logits, perplexity, info and plan do",
               sub->get_name().c_str(), comm.size());
      if (comm.rank() == 0) {
        log::info("%d ranks (%s); rank 0 prints", comm.size(), comm.name().c_str());
      } else {  // the other ranks compute and stay quiet unless something goes wrong
        if (!std::freopen("/dev/null", "w", stdout)) fail("rank %d: cannot silence stdout", comm.rank());
        if (!verbose) log::set_level(log::Level::kWarn);
      }
    }
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return run();
  } catch (const Error& e) {
    return failed(e.what());
  } catch (const std::bad_alloc&) {
    return failed("out of memory");
  } catch (const std::exception& e) {
    return failed(e.what());
  }
  return 1;
}
