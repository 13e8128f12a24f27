// Options shared by every command that loads a model, declared once.
#pragma once
#include "cli/command.h"
#include "runtime/engine.h"

namespace tern::cli {

inline void add_engine_options(CLI::App& app, runtime::EngineOptions& o, bool model_required = true) {
  auto* m = app.add_option("-m,--model", o.model_path, "Model file (GGUF)");
  if (model_required) m->required();
  app.add_option("-c,--ctx-size", o.n_ctx, "Context size in tokens (0: the model's, capped by free memory)");
  app.add_option("-t,--threads", o.threads, "Threads (0: all hardware threads)");
  app.add_option("--kv-type", o.kv_type, "KV cache element type: f16 or f32")->capture_default_str();
  app.add_option("--dump-tensors", o.dump_dir, "Write every named intermediate as DIR/<name>.npy");
}

}  // namespace tern::cli
