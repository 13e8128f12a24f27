// `tern sysinfo`: the CPU features tern sees and the kernel ISA it will use.
#include <cstdio>

#include "cli/command.h"
#include "core/cpu.h"
#include "core/parallel.h"

namespace tern::cli {

static RunFn setup_sysinfo(CLI::App& app) {
  return [] {
    std::printf("cpu features: %s\n", cpu_features().summary().c_str());
    std::printf("kernel isa:   %s\n", isa_name(best_isa()));
    std::printf("threads:      %d\n", n_threads());
    return 0;
  };
}

TERN_COMMAND(sysinfo, "sysinfo", "Print CPU features and the kernel ISA tern selects", setup_sysinfo);

}  // namespace tern::cli
