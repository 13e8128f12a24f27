// `tern perplexity -m MODEL -f FILE [-c 512]`: perplexity over a text file, chunked like llama.cpp's perplexity
// tool so the figures are comparable: the text is tokenized once, cut into chunks of n_ctx tokens, each chunk is
// evaluated from an empty state, and the tokens of the second half of each chunk are scored (every token then
// has at least n_ctx/2 tokens of context). With add_bos the chunk's first token is replaced by BOS, as llama.cpp.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/model_options.h"
#include "cli/text_model.h"
#include "core/error.h"

namespace tern::cli {

static RunFn setup_perplexity(CLI::App& app) {
  struct Opts {
    runtime::EngineOptions engine;
    std::string file;
    int64_t chunks = -1;
  };
  auto o = std::make_shared<Opts>();
  o->engine.n_ctx = 512;
  add_engine_options(app, o->engine);
  app.add_option("-f,--file", o->file, "Text file")->required();
  app.add_option("--chunks", o->chunks, "Most chunks to evaluate (-1: all)");
  return [o] {
    std::ifstream in(o->file, std::ios::binary);
    if (!in) fail("-f %s: cannot read the text file", o->file.c_str());
    std::stringstream ss;
    ss << in.rdbuf();
    TextModel tm(o->engine);
    const text::Tokenizer& tok = *tm.tokenizer;
    std::vector<int32_t> tokens = tok.encode(ss.str(), /*parse_special=*/false);
    const bool add_bos = tok.add_bos() && tok.bos_id() >= 0;
    if (add_bos) tokens.insert(tokens.begin(), tok.bos_id());
    const int64_t n_ctx = tm.engine->n_ctx();
    if (static_cast<int64_t>(tokens.size()) < 2 * n_ctx)
      fail("%s: %zu tokens; perplexity needs at least 2 * n_ctx = %lld (lower -c)", o->file.c_str(), tokens.size(),
           static_cast<long long>(2 * n_ctx));
    int64_t n_chunk = static_cast<int64_t>(tokens.size()) / n_ctx;
    if (o->chunks >= 0) n_chunk = std::min(n_chunk, o->chunks);
    const int64_t first = n_ctx / 2, V = tm.engine->info().n_vocab;
    std::fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %lld, scoring positions %lld..%lld of each\n",
                 tokens.size(), static_cast<long long>(n_chunk), static_cast<long long>(n_ctx),
                 static_cast<long long>(first + 1), static_cast<long long>(n_ctx - 1));
    double nll = 0, nll2 = 0;
    int64_t count = 0;
    auto seq = tm.engine->new_sequence();
    for (int64_t ch = 0; ch < n_chunk; ++ch) {
      std::vector<int32_t> chunk(tokens.begin() + ch * n_ctx, tokens.begin() + (ch + 1) * n_ctx);
      if (add_bos) chunk[0] = tok.bos_id();
      seq->reset();
      const std::vector<float>& lg = tm.engine->eval(*seq, chunk, /*all_logits=*/true);
      for (int64_t j = first; j < n_ctx - 1; ++j) {
        const float* row = lg.data() + j * V;
        double mx = row[0];
        for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
        double z = 0;
        for (int64_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
        const double lp = row[chunk[j + 1]] - mx - std::log(z);
        nll -= lp;
        nll2 += lp * lp;
        ++count;
      }
      std::printf("[%lld]%.4f,", static_cast<long long>(ch + 1), std::exp(nll / count));
      std::fflush(stdout);
    }
    const double mean = nll / count, var = nll2 / count - mean * mean;
    const double ppl = std::exp(mean), err = ppl * std::sqrt(std::max(var, 0.0) / std::max<int64_t>(count - 1, 1));
    std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    return 0;
  };
}

TERN_COMMAND(perplexity, "perplexity", "Perplexity of a model over a text file (llama.cpp's method)", setup_perplexity);

}  // namespace tern::cli
