// tern: one binary, subcommands registered by the files in cli/. Any tern::Error or bad flag ends the process
// with exit status 1 and one message on stderr.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"

namespace tern::cli {
std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}
}  // namespace tern::cli

int main(int argc, char** argv) {
  using namespace tern;
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
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return run();
  } catch (const Error& e) {
    std::fprintf(stderr, "tern: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tern: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tern: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
