// `tern chat -m MODEL`: interactive terminal chat. Streams answers; line editing and history (libedit); a line
// ending in '\' continues on the next line; /reset, /system TEXT, /tool RESULT, /exit; Ctrl-C stops the current
// answer without leaving. Answers are split as the server splits them (serve/chat_output.h): the think block is
// hidden (dimmed with --show-thinking); with --tools, tool calls in the template's dialect are listed and their
// results, given with /tool, go back through the template. The sequence state is kept between turns: a new turn
// feeds only its own tokens (see turn_tokens).
// Across ranks (mpirun): rank 0 reads each message and broadcasts it; every rank runs the same turn (the decode
// loop's collectives) and rank 0 prints. Ctrl-C is left to mpirun there (it ends the job): one rank stopping an
// answer alone would leave the others waiting at a collective.
#include <editline/readline.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <csignal>
#include <cstdio>
#include <deque>
#include <fstream>
#include <sstream>

#include "cli/model_options.h"
#include "cli/template_options.h"
#include "cli/text_model.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "runtime/generate.h"
#include "serve/chat_output.h"
#include "text/chat_template.h"

namespace tern::cli {

namespace {

std::atomic<bool> g_interrupt{false};
void on_sigint(int) { g_interrupt = true; }

using json = nlohmann::ordered_json;

// Status lines on stderr: rank 0's only (every rank runs the same turn).
void note(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void note(const char* fmt, ...) {
  if (world().rank() != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
}

// Prints an answer as it streams: reasoning dimmed (--show-thinking) or hidden, content as it is.
class AnswerPrinter {
 public:
  AnswerPrinter(bool show_thinking, bool tty) : show_(show_thinking), tty_(tty) {}
  void print(const serve::ChatDelta& d) {
    if (!d.reasoning.empty() && show_) {
      if (!dim_) out(tty_ ? "\033[2m" : "");
      dim_ = true;
      out(d.reasoning);
    }
    if (!d.content.empty()) {
      end_reasoning();
      out(d.content);
    }
  }
  void end_reasoning() {
    if (dim_) out(tty_ ? "\033[0m\n" : "\n");
    dim_ = false;
  }

 private:
  static void out(const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  }
  bool show_, tty_, dim_ = false;
};

// --tools FILE: an OpenAI "tools" array ([{"type": "function", "function": {"name", "description", "parameters"}}]).
json load_tools(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("--tools %s: cannot read the file", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  json tools = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (tools.is_discarded()) fail("--tools %s: not valid JSON", path.c_str());
  if (!tools.is_array() || tools.empty()) fail("--tools %s: expected a non-empty JSON array of tools", path.c_str());
  for (size_t i = 0; i < tools.size(); ++i)
    if (const auto e = serve::check_tool_definition(tools[i]))
      fail("--tools %s: [%zu]%s: expected %s", path.c_str(), i, e->field.c_str(), e->expected.c_str());
  return tools;
}

struct ChatOptions {
  runtime::EngineOptions engine;
  runtime::SamplingParams sampling;
  runtime::GenerateOptions gen;
  std::string system, template_kwargs, tools_path;
  bool show_thinking = false;
};

class ChatSession {
 public:
  explicit ChatSession(ChatOptions& o) : o_(o), tm_(o.engine), sampler_(o.sampling) {
    if (!tm_.chat_template) fail("%s: the model has no chat template (tokenizer.chat_template)", o.engine.model_path.c_str());
    tpl_ = std::make_unique<text::ChatTemplate>(*tm_.chat_template);
    kwargs_ = parse_template_kwargs(o.template_kwargs);
    if (!o.tools_path.empty()) {
      tools_ = load_tools(o.tools_path);
      std::string why;
      format_ = serve::tool_call_format_of(*tm_.chat_template, &why);
      log::info("chat: %zu tools; tool calls parsed in the %s form (%s)", tools_.size(),
                serve::tool_call_format_name(format_), why.c_str());
    }
    seq_ = tm_.engine->new_sequence();
    reset(o.system);
  }

  void reset(const std::string& system) {
    messages_ = json::array();
    if (!system.empty()) messages_.push_back({{"role", "system"}, {"content", system}});
    seq_->reset();
    unfed_.clear();
    pending_.clear();
    results_.clear();
    sampler_.reset();
  }

  void user_turn(const std::string& user) {
    if (!pending_.empty())
      fail("%zu tool call(s) wait for a result: give each with /tool RESULT (or /reset)", pending_.size());
    turn({json{{"role", "user"}, {"content", user}}});
  }

  // The result of the oldest pending tool call; the answer continues once every call has one.
  void tool_result(const std::string& result) {
    if (pending_.empty()) fail("no tool call is waiting for a result");
    results_.push_back({{"role", "tool"}, {"tool_call_id", pending_.front()}, {"content", result}});
    pending_.pop_front();
    if (!pending_.empty()) {
      note("[%zu more tool result(s) expected]\n", pending_.size());
      return;
    }
    std::vector<json> msgs;
    msgs.swap(results_);
    try {
      turn(msgs);
    } catch (const Error&) {  // the calls wait again: their results are to be given again
      for (const json& m : msgs) pending_.push_back(m["tool_call_id"].get<std::string>());
      throw;
    }
  }

 private:
  void turn(const std::vector<json>& new_messages) {
    std::string prompt_text;
    std::vector<int32_t> ids = next_turn_tokens(new_messages, &prompt_text);
    // As the server does: a think block the prompt leaves open is reasoning up to </think>; otherwise the answer
    // may open one.
    const serve::Reasoning reasoning =
        serve::prompt_opens_think(prompt_text) ? serve::Reasoning::kOpen : serve::Reasoning::kMaybe;
    serve::ChatOutputSplitter split(reasoning, tools_, format_);
    AnswerPrinter printer(o_.show_thinking, isatty(STDOUT_FILENO));
    g_interrupt = false;
    runtime::GenerateResult r;
    try {
      r = runtime::generate(*tm_.engine, *seq_, *tm_.tokenizer, sampler_, ids, o_.gen, [&](const std::string& piece) {
        printer.print(split.push(piece));
        return !g_interrupt.load();
      });
    } catch (const Error& e) {
      messages_.erase(messages_.end() - static_cast<std::ptrdiff_t>(new_messages.size()), messages_.end());
      throw;
    }
    std::vector<serve::ToolCall> calls;
    const serve::ChatDelta tail = split.finish(&calls);
    printer.print(tail);
    printer.end_reasoning();
    std::printf(r.reason == runtime::StopReason::kCancelled ? " [stopped]\n" : "\n");
    // The sequence has processed the prompt and every generated token but the last one; an answer cut short
    // (length, Ctrl-C, stop string) still owes that token, an answer ended by an end-of-generation token does
    // not (the template's turn end follows).
    unfed_.clear();
    if (!r.tokens.empty() && r.reason != runtime::StopReason::kEos) unfed_.push_back(r.tokens.back());
    if (calls.empty()) {
      messages_.push_back({{"role", "assistant"}, {"content", r.text}});
    } else {  // later turns feed the answer as generated; a re-render sees the calls as the server's clients send them
      json message{{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array()}};
      for (size_t i = 0; i < calls.size(); ++i) {
        const std::string id = "call_" + std::to_string(++n_calls_);
        message["tool_calls"].push_back(
            {{"id", id}, {"type", "function"}, {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
        pending_.push_back(id);
        std::printf("[tool call %s: %s %s]\n", id.c_str(), calls[i].name.c_str(), calls[i].arguments.dump().c_str());
      }
      messages_.push_back(std::move(message));
      note("[give each result with /tool RESULT]\n");
    }
    const size_t n_gen = r.tokens.size();
    note("[prompt: %lld new tokens, %.1f tok/s | generation: %zu tokens, %.1f tok/s | context %lld/%lld]\n",
                 static_cast<long long>(r.n_prompt), r.n_prompt / std::max(r.prompt_seconds, 1e-9), n_gen,
                 n_gen > 1 ? (n_gen - 1) / std::max(r.gen_seconds, 1e-9) : 0.0, static_cast<long long>(seq_->n_past()),
                 static_cast<long long>(seq_->n_ctx()));
  }

  // Tokens that take the sequence from where it stands to the start of the next answer; *text: the text they
  // encode (but the unfed token). The first turn is the rendered conversation. Later turns never re-render the
  // history (templates rewrite earlier answers, and the recurrent state cannot be rolled back to match): they feed
  // the answer's own unfed last token, then the turn delta (text/chat_template.h), which is what `tern serve` puts
  // in a continued conversation's prompt too.
  std::vector<int32_t> next_turn_tokens(const std::vector<json>& new_messages, std::string* text) {
    for (const json& m : new_messages) messages_.push_back(m);
    try {
      return turn_tokens(new_messages.size(), text);
    } catch (const Error&) {
      messages_.erase(messages_.end() - static_cast<std::ptrdiff_t>(new_messages.size()), messages_.end());
      throw;
    }
  }
  std::vector<int32_t> turn_tokens(size_t n_new, std::string* text) {
    if (seq_->n_past() > 0) {
      const size_t answer = messages_.size() - n_new - 1;  // the last answer, which the sequence has processed
      const std::optional<std::string> delta = tpl_->turn_delta(messages_, answer, tools_, kwargs_);
      if (delta) {
        std::vector<int32_t> ids = unfed_;
        const std::vector<int32_t> enc = tm_.tokenizer->encode(*delta, /*parse_special=*/true);
        ids.insert(ids.end(), enc.begin(), enc.end());
        *text = *delta;
        return ids;
      }
      log::info("chat: the template does not show the last answer verbatim; reprocessing the conversation");
      seq_->reset();
      unfed_.clear();
    }
    const std::vector<std::string> pieces = tpl_->render_turns(messages_, tools_, kwargs_);
    text->clear();
    for (const std::string& p : pieces) *text += p;
    return text::encode_turns(*tm_.tokenizer, pieces);
  }

  ChatOptions& o_;
  TextModel tm_;
  runtime::Sampler sampler_;
  std::unique_ptr<text::ChatTemplate> tpl_;
  json kwargs_;  // --chat-template-kwargs
  json tools_;   // --tools (null: none)
  serve::ToolCallFormat format_ = serve::ToolCallFormat::kQwen;
  std::unique_ptr<models::SequenceState> seq_;
  json messages_;
  std::vector<int32_t> unfed_;   // the last answer's final sampled token when the sequence has not processed it
  std::deque<std::string> pending_;  // ids of the last answer's tool calls still without a result
  std::vector<json> results_;        // results given so far for them
  size_t n_calls_ = 0;
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

// read_message on rank 0, the same message on every rank (false on every rank at the end of input).
bool read_message_on_every_rank(std::string& out) {
  Comm& comm = world();
  if (comm.size() == 1) return read_message(out);
  int64_t n = -1;
  if (comm.rank() == 0) n = read_message(out) ? static_cast<int64_t>(out.size()) : -1;
  comm.broadcast(&n, sizeof n, 0);
  if (n < 0) return false;
  out.resize(static_cast<size_t>(n));
  if (n > 0) comm.broadcast(out.data(), static_cast<size_t>(n), 0);
  return true;
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
  app.add_option("--tools", o->tools_path,
                 "JSON file with an OpenAI tools array: the model may call them; give each result with /tool RESULT");
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
    if (world().size() == 1) {  // across ranks Ctrl-C is mpirun's (see the file comment)
      struct sigaction sa {};
      sa.sa_handler = on_sigint;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGINT, &sa, nullptr);
    }
    note("tern chat: type a message; '\\' at the end of a line continues it; /reset, /system TEXT, "
                         "/tool RESULT, /exit\n");
    std::string msg;
    while (read_message_on_every_rank(msg)) {
      if (msg.empty()) continue;
      if (msg == "/exit" || msg == "/quit") break;
      if (msg == "/reset") {
        chat.reset(o->system);
        note("[conversation reset]\n");
        continue;
      }
      if (msg.rfind("/system", 0) == 0) {
        o->system = msg.size() > 8 ? msg.substr(8) : "";
        chat.reset(o->system);
        note("[system message set; conversation reset]\n");
        continue;
      }
      const bool tool = msg.rfind("/tool ", 0) == 0;
      if (msg[0] == '/' && !tool) {
        note("unknown command %s (commands: /reset, /system TEXT, /tool RESULT, /exit)\n", msg.c_str());
        continue;
      }
      try {
        if (tool) chat.tool_result(msg.substr(6));
        else chat.user_turn(msg);
      } catch (const Error& e) {
        note("error: %s\n", e.what());
      }
    }
    return 0;
  };
}

TERN_COMMAND(chat, "chat", "Interactive chat in the terminal", setup_chat);

}  // namespace tern::cli
