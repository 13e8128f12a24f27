// Subcommand registry for the `tern` binary: each cli/<name>.cpp registers itself with TERN_COMMAND, declaring
// its options on a CLI11 sub-app and returning a callback that runs it. main() owns parsing and error exits.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace tern::cli {

using RunFn = std::function<int()>;
// Declares options on `app` (already named and described) and returns the function that runs the command.
using SetupFn = std::function<RunFn(CLI::App& app)>;

struct Command {
  std::string name;
  std::string description;
  SetupFn setup;
};

std::vector<Command>& commands();

struct Registrar {
  Registrar(const char* name, const char* description, SetupFn setup) {
    commands().push_back({name, description, std::move(setup)});
  }
};

#define TERN_COMMAND(ident, name, description, setup) \
  static ::tern::cli::Registrar tern_command_registrar_##ident(name, description, setup)

}  // namespace tern::cli
