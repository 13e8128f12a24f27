// HF checkpoint -> GGUF conversion for Qwen3.5-MoE, dense Qwen3.5, Qwen3-Next and GLM-5 (`tern convert`). Streams
// tensor by tensor: each output tensor is built in one float buffer, encoded, written and its source pages
// released, so peak memory is a small multiple of the largest tensor. The output goes to OUT.tmp-XXXXXX and is
// renamed at the end; on any error the temporary file is removed. Non-goals: other architectures, imatrix
// quantization, split output.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "convert/contract.h"
#include "convert/metadata.h"
#include "convert/quant_mix.h"
#include "quant/types.h"

namespace tern::convert {

struct Options {
  std::string input_dir;                       // HF checkpoint directory
  std::string output;                          // OUT.gguf
  FileType type = FileType::F16;               // --type
  std::optional<quant::Type> expert_type;      // --expert-type (routed experts)
  bool no_mtp = false;                         // --no-mtp: drop the MTP block(s) (Qwen mtp.*, GLM model.layers.N >=
                                               // num_hidden_layers); default: exported as block n_layer + nextn keys
  bool dry_run = false;                        // --dry-run: print the plan, write nothing
  std::string vocab_pre;                       // --vocab-pre: tokenizer.ggml.pre override
  std::string name;                            // general.name; empty = input directory base name
  bool progress = false;                       // progress bar (the CLI enables it on a terminal)
};

struct Summary {
  size_t n_tensors = 0;
  uint64_t bytes_written = 0;  // whole file
  size_t n_sources_converted = 0, n_skipped_mtp = 0, n_skipped_visual = 0;
  size_t n_mtp_sources = 0;    // of n_sources_converted, those of the MTP block(s) kept
  int64_t n_mtp_layers = 0;    // MTP blocks written (nextn_predict_layers)
};

// A fully planned conversion (no tensor data read yet).
struct Prepared {
  Checkpoint ck;
  Plan plan;
  std::vector<quant::Type> types;  // per plan.tensors
  KeyValues kv;
};
Prepared prepare(const Options& o);

// The --dry-run report: counts per class and the output size for every --type.
std::string describe_plan(const Prepared& p, const Options& o);

// Runs the whole conversion (or the dry run, printing the plan to stdout). Throws Error on any failure
// after removing the temporary output.
Summary run(const Options& o);

// Removes the in-progress temporary file (async-signal-safe; for SIGINT/SIGTERM handlers).
void remove_temp_on_signal();

// Float data of one planned tensor, transforms applied, in PyTorch order (exposed for tests).
void materialize(const OutTensor& t, const HParams& hp, std::vector<float>& out);
// ggml encoding of n floats as type (row = ne[0]); out is resized to the byte size.
void encode(quant::Type type, const float* x, int64_t n, int64_t row, std::vector<uint8_t>& out);

}  // namespace tern::convert
