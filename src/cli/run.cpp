// `tern run`: generate a continuation of a prompt.
// - Text mode: `-p TEXT` or `-f FILE` (`--chat` wraps it in the model's chat template); the completion streams to
//   stdout, prompt and generation speed go to stderr at the end.
// - Token mode (a contract outside checks rely on): `--tokens 1,2,3 --print-ids` prints the generated ids
//   separated by single spaces on one line of stdout and nothing else.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/model_options.h"
#include "cli/template_options.h"
#include "cli/text_model.h"
#include "core/error.h"
#include "core/log.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "text/chat_template.h"

namespace tern::cli {

namespace {

struct RunOptions {
  runtime::EngineOptions engine;
  runtime::SamplingParams sampling;
  runtime::GenerateOptions gen;
  std::string prompt, prompt_file, tokens, system, template_kwargs;
  bool print_ids = false, chat = false;
};

void add_sampling_options(CLI::App& app, runtime::SamplingParams& s) {
  app.add_option("--temp", s.temperature, "Temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", s.top_k, "Top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", s.top_p, "Top-p (1: off)")->capture_default_str();
  app.add_option("--min-p", s.min_p, "Min-p (0: off)")->capture_default_str();
  app.add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  app.add_option("--presence-penalty", s.presence_penalty, "Presence penalty")->capture_default_str();
  app.add_option("--frequency-penalty", s.frequency_penalty, "Frequency penalty")->capture_default_str();
  app.add_option("--seed", s.seed, "Sampling seed")->capture_default_str();
}

int run_token_mode(RunOptions& o) {
  if (!o.print_ids) fail("--tokens needs --print-ids (the generated ids are printed, not text)");
  std::vector<int32_t> prompt = runtime::parse_token_list(o.tokens);
  if (o.gen.n_predict < 0) fail("-n must be >= 0 with --tokens");
  runtime::Sampler sampler(o.sampling);
  runtime::Engine engine(o.engine);
  auto seq = engine.new_sequence();
  if (static_cast<int64_t>(prompt.size()) + o.gen.n_predict > engine.n_ctx())
    fail("prompt (%zu tokens) + %d to generate exceeds the context size %lld (raise -c)", prompt.size(),
         o.gen.n_predict, static_cast<long long>(engine.n_ctx()));
  for (int32_t t : prompt) sampler.accept(t);
  // The decode loop (speculative when the model drafts): every taken token is printed, end tokens included.
  std::vector<int32_t> out;
  runtime::DecodeSeq ds;
  ds.state = seq.get();
  std::vector<runtime::DecodeSeq*> one = {&ds};
  auto pick = [&](size_t, const runtime::LogitsRow& logits, int32_t) {
    const int32_t tok = sampler.sample(logits);
    sampler.accept(tok);
    out.push_back(tok);
    if (static_cast<int>(out.size()) >= o.gen.n_predict) ds.stopped = true;
    return tok;
  };
  for (size_t fed = 0; fed < prompt.size();) {
    const size_t n = std::min(prompt.size() - fed, static_cast<size_t>(runtime::kMaxBatchRows));
    ds.feed.assign(prompt.begin() + fed, prompt.begin() + fed + n);
    fed += n;
    ds.sample = fed == prompt.size() && o.gen.n_predict > 0;
    engine.decoder().step(one, pick);
  }
  while (static_cast<int>(out.size()) < o.gen.n_predict) {
    ds.feed = {out.back()};
    ds.sample = true;
    engine.decoder().step(one, pick);
  }
  std::string line;
  for (size_t i = 0; i < out.size(); ++i) line += (i ? " " : "") + std::to_string(out[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("-f %s: cannot read the prompt file", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int run_text_mode(RunOptions& o) {
  std::string prompt = o.prompt_file.empty() ? o.prompt : read_file(o.prompt_file);
  if (prompt.empty()) fail("empty prompt: give text with -p or -f");
  runtime::Sampler sampler(o.sampling);
  TextModel tm(o.engine);
  std::vector<int32_t> ids;
  if (o.chat) {
    if (!tm.chat_template) fail("--chat: the model has no chat template (tokenizer.chat_template)");
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    if (!o.system.empty()) msgs.push_back({{"role", "system"}, {"content", o.system}});
    msgs.push_back({{"role", "user"}, {"content", prompt}});
    std::string rendered = text::render_chat(*tm.chat_template, msgs, nullptr, true, parse_template_kwargs(o.template_kwargs));
    ids = tm.tokenizer->encode(rendered, /*parse_special=*/true);
  } else {
    ids = tm.tokenizer->encode(prompt, /*parse_special=*/false);
  }
  if (tm.tokenizer->add_bos() && tm.tokenizer->bos_id() >= 0) ids.insert(ids.begin(), tm.tokenizer->bos_id());
  auto seq = tm.engine->new_sequence();
  runtime::GenerateResult r = runtime::generate(*tm.engine, *seq, *tm.tokenizer, sampler, ids, o.gen,
                                                [](const std::string& piece) {
                                                  std::fwrite(piece.data(), 1, piece.size(), stdout);
                                                  std::fflush(stdout);
                                                  return true;
                                                });
  std::fputc('\n', stdout);
  const size_t n_gen = r.tokens.size();
  log::info("prompt: %lld tokens in %.2f s (%.1f tok/s); generation: %zu tokens in %.2f s (%.1f tok/s); stop: %s",
            static_cast<long long>(r.n_prompt), r.prompt_seconds, r.n_prompt / std::max(r.prompt_seconds, 1e-9), n_gen,
            r.gen_seconds, n_gen > 1 ? (n_gen - 1) / std::max(r.gen_seconds, 1e-9) : 0.0,
            runtime::stop_reason_name(r.reason));
  return 0;
}

}  // namespace

static RunFn setup_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  add_engine_options(app, o->engine, ModelArg::kBundledDefault);
  app.add_option("-p,--prompt", o->prompt, "Prompt text");
  app.add_option("-f,--file", o->prompt_file, "Read the prompt from a file");
  app.add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template as a user message");
  app.add_option("--system", o->system, "System message (with --chat)");
  add_template_kwargs_option(app, o->template_kwargs);
  app.add_option("--tokens", o->tokens, "Prompt as token ids, comma separated (with --print-ids)");
  app.add_flag("--print-ids", o->print_ids, "Print generated token ids instead of text");
  app.add_option("-n,--n-predict", o->gen.n_predict, "Tokens to generate (-1: until end of generation)")
      ->capture_default_str();
  app.add_option("--stop", o->gen.stop, "Stop string (repeatable)");
  app.add_flag("--ignore-eos", o->gen.ignore_eos, "Keep generating past end-of-generation tokens");
  add_sampling_options(app, o->sampling);
  add_draft_options(app, o->engine);
  return [o] {
    use_bundled_model_if_unset(o->engine);
    const int modes = !o->tokens.empty() + !o->prompt.empty() + !o->prompt_file.empty();
    if (modes != 1) fail("give exactly one of -p TEXT, -f FILE or --tokens IDS");
    return o->tokens.empty() ? run_text_mode(*o) : run_token_mode(*o);
  };
}

TERN_COMMAND(run, "run", "Generate a continuation of a prompt", setup_run);

}  // namespace tern::cli
