// `tern convert HF_DIR -o OUT.gguf --type TYPE`: a Qwen3.5 / Qwen3-Next or GLM-5 Hugging Face checkpoint to GGUF,
// equivalent to llama.cpp's convert_hf_to_gguf.py (+ llama-quantize for the K-quant mixes). See docs/CONVERT.md.
#include <csignal>
#include <unistd.h>

#include "cli/command.h"
#include "convert/convert.h"
#include "core/error.h"
#include "core/log.h"

namespace tern::cli {

namespace {

extern "C" void on_signal(int sig) {
  convert::remove_temp_on_signal();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

static RunFn setup_convert(CLI::App& app) {
  struct Opts {
    convert::Options c;
    std::string type = "f16", expert_type;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("input", o->c.input_dir, "Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer)")
      ->required();
  app.add_option("-o,--output", o->c.output, "Output GGUF path");
  app.add_option("--type", o->type, "Output type: " + convert::file_type_list())->capture_default_str();
  app.add_option("--expert-type", o->expert_type, "Type for routed-expert tensors (ffn_*_exps), e.g. q4_k");
  app.add_flag("--no-mtp", o->c.no_mtp,
               "Drop the multi-token-prediction block (Qwen mtp.*, GLM-5 model.layers.N >= num_hidden_layers); by "
               "default it is written as block n_layer with the nextn keys, as llama.cpp's converter does");
  app.add_flag("--dry-run", o->c.dry_run, "Print the plan (tensor counts, output size per type); write nothing");
  app.add_option("--vocab-pre", o->c.vocab_pre, "tokenizer.ggml.pre value (default: detected from tokenizer.json)");
  app.add_option("--name", o->c.name, "general.name (default: the input directory's base name)");
  return [o] {
    auto ft = convert::file_type_from_name(o->type);
    if (!ft) fail("--type %s: unsupported (supported: %s)", o->type.c_str(), convert::file_type_list().c_str());
    o->c.type = *ft;
    if (!o->expert_type.empty()) {
      auto et = quant::type_from_name(o->expert_type);
      static const quant::Type ok[] = {quant::Type::F32, quant::Type::F16, quant::Type::BF16, quant::Type::Q8_0,
                                       quant::Type::Q4_0, quant::Type::Q4_1, quant::Type::Q5_0, quant::Type::Q5_1,
                                       quant::Type::Q2_K, quant::Type::Q3_K, quant::Type::Q4_K, quant::Type::Q5_K,
                                       quant::Type::Q6_K};
      bool good = false;
      for (quant::Type t : ok) good = good || (et && *et == t);
      if (!good)
        fail("--expert-type %s: unsupported (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, "
             "q4_K, q5_K, q6_K)", o->expert_type.c_str());
      o->c.expert_type = *et;
    }
    if (!o->c.dry_run && o->c.output.empty()) fail("convert: -o/--output is required (or use --dry-run)");
    o->c.progress = ::isatty(STDERR_FILENO) && log::level() <= log::Level::kInfo;
    ::signal(SIGINT, on_signal);
    ::signal(SIGTERM, on_signal);
    ::signal(SIGHUP, on_signal);
    ::signal(SIGXFSZ, SIG_IGN);  // a file-size limit surfaces as a write error (EFBIG), not a kill
    const convert::Summary s = convert::run(o->c);
    if (!o->c.dry_run)
      log::info("convert: wrote %s (%zu tensors, %.2f MiB)", o->c.output.c_str(), s.n_tensors,
                s.bytes_written / 1048576.0);
    return 0;
  };
}

TERN_COMMAND(convert, "convert", "Convert a Qwen3.5 / Qwen3-Next / GLM-5 Hugging Face checkpoint to GGUF",
             setup_convert);

}  // namespace tern::cli
