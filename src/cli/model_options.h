// Options shared by every command that loads a model, declared once.
#pragma once
#include "cli/command.h"
#include "runtime/engine.h"

namespace tern::cli {

// How a command treats a missing -m: an error, or the model bundled with tern (models/tern-tiny-q35moe.gguf).
enum class ModelArg { kRequired, kBundledDefault };

// -c, --kv-type, --mem-budget, --expert-cache: what sizes memory (shared by the engine commands and `tern plan`).
inline void add_memory_options(CLI::App& app, runtime::EngineOptions& o) {
  app.add_option("-c,--ctx-size", o.n_ctx, "Context size in tokens (0: the model's, capped by free memory)");
  app.add_option("--kv-type", o.kv_type, "KV cache element type: f32, f16, q8_0 or q4_0 (K and V)")
      ->capture_default_str();
  app.add_option("--kv-type-k", o.kv_type_k, "K cache element type (default: --kv-type)");
  app.add_option("--kv-type-v", o.kv_type_v, "V cache element type (default: --kv-type)");
  app.add_option("--kv-rotate", o.kv_rotate,
                 "Hadamard-rotate K, V and Q before a quantized cache stores them: auto (on when quantized), on, off")
      ->capture_default_str();
  app.add_option("--kv-sink", o.kv_sink,
                 "A quantized cache keeps the first N positions also in f16 (default " +
                     std::to_string(runtime::kDefaultKvSink) + ")");
  app.add_option("--kv-window", o.kv_window,
                 "A quantized cache keeps each query's latest N positions also in f16 (default " +
                     std::to_string(runtime::kDefaultKvWindow) + ")");
  app.add_option("--mem-budget", o.mem_budget,
                 "Memory budget, e.g. 12G: routed experts are streamed from the file through a cache that gets what "
                 "the dense weights, state and buffers leave (default: no budget, everything memory-mapped)");
  app.add_option("--expert-cache", o.expert_cache,
                 "Stream routed experts through a cache of exactly N experts per layer (overrides the budget's choice)");
  app.add_flag("--no-repack", o.no_repack,
               "Compute from the file's weight layout; by default matrices are repacked at load into the layout the "
               "kernels read fastest (same memory: the file's pages are given back)");
}

inline void add_model_option(CLI::App& app, runtime::EngineOptions& o, ModelArg arg) {
  auto* m = app.add_option("-m,--model", o.model_path,
                           arg == ModelArg::kRequired ? "Model file (GGUF)"
                                                      : "Model file (GGUF; default: the bundled tern-tiny model)");
  if (arg == ModelArg::kRequired) m->required();
}

inline void add_engine_options(CLI::App& app, runtime::EngineOptions& o, ModelArg arg = ModelArg::kRequired) {
  add_model_option(app, o, arg);
  add_memory_options(app, o);
  app.add_option("-t,--threads", o.threads, "Threads (0: all hardware threads)");
  app.add_option("--dump-tensors", o.dump_dir, "Write every named intermediate as DIR/<name>.npy");
  app.add_flag("--stats", o.stats, "Print expert-cache counters and memory use (resident, peak, plan) at the end");
  app.add_option("--mla-form", o.mla_form,
                 "MLA models (glm-dsa): how prefill attention runs: auto (the expanded form for long enough prompt "
                 "pieces, measured), absorbed, or expanded (wherever every key is attended)")
      ->capture_default_str();
  app.add_option("--isa", o.isa,
                 "Kernels' instruction set: auto (the best this CPU has), avx512, avx2 or ref (the scalar twins); "
                 "e.g. avx2 on an AVX-512 CPU to measure those kernels. Same results up to float rounding")
      ->capture_default_str();
  app.add_flag("--expert-parallel", o.expert_parallel,
               "Under mpirun: each rank holds whole experts, 1/N of them, and a layer's output is summed over ranks "
               "(default: each rank holds 1/N of the rows of every expert: balanced at batch 1, exact)");
  app.add_flag("--partial-sums", o.partial_sums,
               "Under mpirun: each rank holds its heads' (its expert rows') columns of the out projections and downs, "
               "and each block's output is summed over ranks: 2 collectives a layer instead of 4, not bit-identical to "
               "one process (default: values gathered, exact)");
}

// Speculative decoding with the model's MTP block (commands that generate: run, chat, serve, bench).
inline void add_draft_options(CLI::App& app, runtime::EngineOptions& o) {
  app.add_option("--draft", o.draft,
                 "Most tokens the model's MTP block drafts per step for speculative decoding (default: " +
                     std::to_string(runtime::kDefaultDraft) +
                     " when the file has an MTP block; the length adapts to the measured acceptance, down to 0)");
  app.add_option("--draft-min-p", o.draft_min_p,
                 "Stop a draft chain at a token whose draft probability is below this")->capture_default_str();
  app.add_flag("--no-spec", o.no_spec, "No speculative decoding (one token per forward)");
  app.add_flag("--draft-fixed", o.draft_fixed,
               "Draft the full --draft length every step instead of adapting it (measures acceptance as llama.cpp's "
               "--spec-type draft-mtp does; can be slower)");
}

// The bundled model's path: next to the binary (<bin>/../models or <bin>/models), else the source tree it was
// built from. An error when none exists.
std::string bundled_model_path();

// --parallel K|auto (tern serve, tern plan): K >= 1, or 0 for auto. Throws Error naming the flag otherwise.
int parse_parallel(const std::string& text);

// Fills o.model_path with the bundled model when -m was not given, and says so once.
void use_bundled_model_if_unset(runtime::EngineOptions& o);

}  // namespace tern::cli
