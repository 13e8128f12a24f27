// `tern chat -m MODEL`: interactive terminal chat. Streams answers; line editing and history (libedit); a line
// ending in '\' continues on the next line; /reset, /system TEXT, /exit; Ctrl-C stops the current answer
// without leaving. The sequence state is kept between turns: a new turn feeds only its own tokens (see
// next_turn_tokens).
#include <editline/readline.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include "cli/model_options.h"
#include "cli/template_options.h"
#include "cli/text_model.h"
#include "core/error.h"
#include "core/log.h"
#include "runtime/generate.h"
#include "text/chat_template.h"

namespace tern::cli {

namespace {

std::atomic<bool> g_interrupt{false};
void on_sigint(int) { g_interrupt = true; }

// Hides <think>...</think> blocks, or shows them dimmed, as text streams through (tags may split across pieces).
class ThinkFilter {
 public:
  ThinkFilter(bool show, bool tty) : show_(show), tty_(tty) {}
  std::string push(const std::string& piece) {
    buf_ += piece;
    std::string out;
    for (;;) {
      const std::string& tag = in_think_ ? kClose : kOpen;
      size_t p = buf_.find(tag);
      if (p != std::string::npos) {
        out += visible(buf_.substr(0, p));
        if (show_) out += (in_think_ ? tag + dim_off() : dim_on() + tag);
        buf_.erase(0, p + tag.size());
        in_think_ = !in_think_;
        continue;
      }
      // Keep a possible partial tag at the end.
      size_t keep = 0;
      for (size_t k = std::min(tag.size() - 1, buf_.size()); k > 0; --k)
        if (buf_.compare(buf_.size() - k, k, tag, 0, k) == 0) {
          keep = k;
          break;
        }
      out += visible(buf_.substr(0, buf_.size() - keep));
      buf_.erase(0, buf_.size() - keep);
      return out;
    }
  }
  std::string flush() {
    std::string out = visible(buf_) + (in_think_ && show_ ? dim_off() : "");
    buf_.clear();
    in_think_ = false;
    return out;
  }

 private:
  std::string visible(const std::string& s) const { return in_think_ && !show_ ? "" : s; }
  std::string dim_on() const { return tty_ ? "\033[2m" : ""; }
  std::string dim_off() const { return tty_ ? "\033[0m" : ""; }
  inline static const std::string kOpen = "<think>", kClose = "</think>";
  bool show_, tty_, in_think_ = false;
  std::string buf_;
};

struct ChatOptions {
  runtime::EngineOptions engine;
  runtime::SamplingParams sampling;
  runtime::GenerateOptions gen;
  std::string system, template_kwargs;
  bool show_thinking = false;
};

class ChatSession {
 public:
  explicit ChatSession(ChatOptions& o) : o_(o), tm_(o.engine), sampler_(o.sampling) {
    if (!tm_.chat_template) fail("%s: the model has no chat template (tokenizer.chat_template)", o.engine.model_path.c_str());
    tpl_ = std::make_unique<text::ChatTemplate>(*tm_.chat_template);
    kwargs_ = parse_template_kwargs(o.template_kwargs);
    seq_ = tm_.engine->new_sequence();
    reset(o.system);
  }

  void reset(const std::string& system) {
    messages_ = nlohmann::ordered_json::array();
    if (!system.empty()) messages_.push_back({{"role", "system"}, {"content", system}});
    seq_->reset();
    unfed_.clear();
    sampler_.reset();
  }

  void turn(const std::string& user) {
    std::vector<int32_t> ids = next_turn_tokens(user);
    const bool tty = isatty(STDOUT_FILENO);
    ThinkFilter filter(o_.show_thinking, tty);
    g_interrupt = false;
    runtime::GenerateResult r;
    try {
      r = runtime::generate(*tm_.engine, *seq_, *tm_.tokenizer, sampler_, ids, o_.gen, [&](const std::string& piece) {
        std::string s = filter.push(piece);
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
        return !g_interrupt.load();
      });
    } catch (const Error& e) {
      messages_.erase(messages_.end() - 1);
      throw;
    }
    std::string tail = filter.flush();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::printf(r.reason == runtime::StopReason::kCancelled ? " [stopped]\n" : "\n");
    // The sequence has processed the prompt and every generated token but the last one; an answer cut short
    // (length, Ctrl-C, stop string) still owes that token, an answer ended by an end-of-generation token does
    // not (the template's turn end follows).
    unfed_.clear();
    if (!r.tokens.empty() && r.reason != runtime::StopReason::kEos) unfed_.push_back(r.tokens.back());
    messages_.push_back({{"role", "assistant"}, {"content", r.text}});
    const size_t n_gen = r.tokens.size();
    std::fprintf(stderr, "[prompt: %lld new tokens, %.1f tok/s | generation: %zu tokens, %.1f tok/s | context %lld/%lld]\n",
                 static_cast<long long>(r.n_prompt), r.n_prompt / std::max(r.prompt_seconds, 1e-9), n_gen,
                 n_gen > 1 ? (n_gen - 1) / std::max(r.gen_seconds, 1e-9) : 0.0, static_cast<long long>(seq_->n_past()),
                 static_cast<long long>(seq_->n_ctx()));
  }

 private:
  // Tokens that take the sequence from where it stands to the start of the next answer. The first turn is the
  // rendered conversation. Later turns never re-render the history (templates rewrite earlier answers, and the
  // recurrent state cannot be rolled back to match): they feed the answer's own unfed last token, then the turn
  // delta (text/chat_template.h), which is what `tern serve` puts in a continued conversation's prompt too.
  std::vector<int32_t> next_turn_tokens(const std::string& user) {
    messages_.push_back({{"role", "user"}, {"content", user}});
    try {
      return turn_tokens();
    } catch (const Error&) {
      messages_.erase(messages_.end() - 1);
      throw;
    }
  }
  std::vector<int32_t> turn_tokens() {
    if (seq_->n_past() > 0) {
      const std::optional<std::string> delta = tpl_->turn_delta(messages_, messages_.size() - 2, nullptr, kwargs_);
      if (delta) {
        std::vector<int32_t> ids = unfed_;
        const std::vector<int32_t> enc = tm_.tokenizer->encode(*delta, /*parse_special=*/true);
        ids.insert(ids.end(), enc.begin(), enc.end());
        return ids;
      }
      log::info("chat: the template does not show the last answer verbatim; reprocessing the conversation");
      seq_->reset();
      unfed_.clear();
    }
    return text::encode_turns(*tm_.tokenizer, tpl_->render_turns(messages_, nullptr, kwargs_));
  }

 private:
  ChatOptions& o_;
  TextModel tm_;
  runtime::Sampler sampler_;
  std::unique_ptr<text::ChatTemplate> tpl_;
  nlohmann::ordered_json kwargs_;  // --chat-template-kwargs
  std::unique_ptr<models::SequenceState> seq_;
  nlohmann::ordered_json messages_;
  std::vector<int32_t> unfed_;  // the last answer's final sampled token when the sequence has not processed it
};

// Reads one message: lines ending in '\' continue. Returns false at end of input.
bool read_message(std::string& out) {
  out.clear();
  const char* prompt = "> ";
  for (;;) {
    g_interrupt = false;
    char* line = readline(prompt);
    if (!line) {
      if (g_interrupt.exchange(false)) {  // Ctrl-C at the prompt drops the message being typed, like a shell
        std::fputs("^C\n", stdout);
        out.clear();
        prompt = "> ";
        continue;
      }
      return !out.empty();  // end of input (Ctrl-D)
    }
    std::string s(line);
    std::free(line);
    if (!s.empty() && s.back() == '\\') {
      out += s.substr(0, s.size() - 1) + "\n";
      prompt = ". ";
      continue;
    }
    out += s;
    if (!out.empty()) add_history(out.c_str());
    return true;
  }
}

}  // namespace

static RunFn setup_chat(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  o->sampling.temperature = 0.7f;
  add_engine_options(app, o->engine, ModelArg::kBundledDefault);
  add_draft_options(app, o->engine);
  app.add_option("--system", o->system, "System message");
  add_template_kwargs_option(app, o->template_kwargs);
  app.add_flag("--show-thinking", o->show_thinking, "Show <think> blocks (dimmed) instead of hiding them");
  app.add_option("-n,--n-predict", o->gen.n_predict, "Most tokens per answer (-1: until end of turn)")
      ->capture_default_str();
  app.add_option("--temp", o->sampling.temperature, "Temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", o->sampling.top_k, "Top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", o->sampling.top_p, "Top-p (1: off)")->capture_default_str();
  app.add_option("--min-p", o->sampling.min_p, "Min-p (0: off)")->capture_default_str();
  app.add_option("--seed", o->sampling.seed, "Sampling seed")->capture_default_str();
  app.add_flag("--ignore-eos", o->gen.ignore_eos, "Keep generating past end-of-generation tokens");
  return [o] {
    use_bundled_model_if_unset(o->engine);
    ChatSession chat(*o);
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    std::fprintf(stderr, "tern chat: type a message; '\\' at the end of a line continues it; /reset, /system TEXT, /exit\n");
    std::string msg;
    while (read_message(msg)) {
      if (msg.empty()) continue;
      if (msg == "/exit" || msg == "/quit") break;
      if (msg == "/reset") {
        chat.reset(o->system);
        std::fprintf(stderr, "[conversation reset]\n");
        continue;
      }
      if (msg.rfind("/system", 0) == 0) {
        o->system = msg.size() > 8 ? msg.substr(8) : "";
        chat.reset(o->system);
        std::fprintf(stderr, "[system message set; conversation reset]\n");
        continue;
      }
      if (msg[0] == '/') {
        std::fprintf(stderr, "unknown command %s (commands: /reset, /system TEXT, /exit)\n", msg.c_str());
        continue;
      }
      try {
        chat.turn(msg);
      } catch (const Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
      }
    }
    return 0;
  };
}

TERN_COMMAND(chat, "chat", "Interactive chat in the terminal", setup_chat);

}  // namespace tern::cli
