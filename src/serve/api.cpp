#include "serve/api.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"

namespace tern::serve {

json ApiError::body() const {
  json e = json::object();
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? json(nullptr) : json(param);
  e["code"] = code.empty() ? json(nullptr) : json(code);
  return json{{"error", e}};
}

void api_fail(int status, const std::string& param, const std::string& code, const std::string& message) {
  ApiError e;
  e.status = status;
  e.param = param;
  e.code = code;
  e.message = message;
  throw e;
}

std::vector<std::string> model_names(const ModelInfo& m) {
  std::vector<std::string> names{m.id};
  for (const std::string& a : m.aliases)
    if (std::find(names.begin(), names.end(), a) == names.end()) names.push_back(a);
  return names;
}

bool accepts_model(const ModelInfo& m, const std::string& name) {
  if (m.any_model) return true;
  const std::vector<std::string> names = model_names(m);
  return std::find(names.begin(), names.end(), name) != names.end();
}

json parse_json_body(const std::string& body) {
  // The parse itself is iterative, but copying, comparing, dumping a value and handing it to the chat template
  // recurse once per level: a body of 200k nested brackets overflowed the stack (fuzz/fuzz_api.cpp).
  int depth = 0;
  json j = json::parse(
      body, [&depth](int d, json::parse_event_t, json&) { depth = std::max(depth, d); return true; },
      /*allow_exceptions=*/false);
  if (depth > kMaxJsonDepth)
    api_fail(400, "", "invalid_json", strf("the request body nests deeper than %d levels", kMaxJsonDepth));
  if (j.is_discarded())
    api_fail(400, "", "invalid_json", "the request body is not valid JSON");
  if (!j.is_object()) api_fail(400, "", "invalid_json", "the request body must be a JSON object");
  return j;
}

std::string to_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

namespace {

void bad_value(const std::string& param, const std::string& why) {
  api_fail(400, param, "invalid_value", "'" + param + "': " + why);
}

bool present(const json& b, const char* key) { return b.contains(key) && !b[key].is_null(); }

// A number in [lo, hi] (open at lo when lo_open).
float number(const json& b, const char* key, float def, double lo, double hi, bool lo_open = false) {
  if (!present(b, key)) return def;
  const json& v = b[key];
  if (!v.is_number()) bad_value(key, "expected a number, got " + v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x) || (lo_open ? x <= lo : x < lo) || x > hi)
    bad_value(key, strf("%s must be in %s%g, %g]", v.dump().c_str(), lo_open ? "(" : "[", lo, hi));
  return static_cast<float>(x);
}

int64_t integer(const json& b, const char* key, int64_t def, int64_t lo, int64_t hi) {
  if (!present(b, key)) return def;
  const json& v = b[key];
  if (!v.is_number_integer()) bad_value(key, "expected an integer, got " + v.dump());
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    bad_value(key, v.dump() + " is too large");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad_value(key, strf("%lld must be in [%lld, %lld]", static_cast<long long>(x),
                                            static_cast<long long>(lo), static_cast<long long>(hi)));
  return x;
}

bool boolean(const json& b, const char* key, bool def) {
  if (!present(b, key)) return def;
  if (!b[key].is_boolean()) bad_value(key, "expected true or false, got " + b[key].dump());
  return b[key].get<bool>();
}

void unsupported(const std::string& param, const std::string& what) {
  api_fail(400, param, "unsupported_parameter", what + " is not supported by this server");
}

// Fields both endpoints share: model, sampling, limits, stop strings, streaming.
ParsedRequest parse_common(const json& b, const ApiContext& ctx) {
  ParsedRequest p;
  p.model = ctx.model.id;
  if (present(b, "model")) {
    if (!b["model"].is_string()) bad_value("model", "expected a string");
    const std::string m = b["model"].get<std::string>();
    if (!accepts_model(ctx.model, m)) {
      std::string names;
      for (const std::string& n : model_names(ctx.model)) names += (names.empty() ? "'" : ", '") + n + "'";
      api_fail(404, "model", "model_not_found",
               "the model '" + m + "' does not exist; this server serves " + names +
                   " (start it with --alias NAME or --any-model to accept other names)");
    }
    const std::vector<std::string> names = model_names(ctx.model);
    if (std::find(names.begin(), names.end(), m) != names.end()) p.model = m;
  }
  runtime::SamplingParams& s = p.gen.sampling;
  s.temperature = number(b, "temperature", s.temperature, 0, 2);
  s.top_p = number(b, "top_p", s.top_p, 0, 1, /*lo_open=*/true);
  s.top_k = static_cast<int>(integer(b, "top_k", s.top_k, 0, 1 << 30));
  s.min_p = number(b, "min_p", s.min_p, 0, 1);
  s.presence_penalty = number(b, "presence_penalty", 0, -2, 2);
  s.frequency_penalty = number(b, "frequency_penalty", 0, -2, 2);
  s.repeat_penalty = number(b, "repeat_penalty", 1, 0, 10, /*lo_open=*/true);
  if (present(b, "seed")) {
    if (!b["seed"].is_number_integer()) bad_value("seed", "expected an integer, got " + b["seed"].dump());
    s.seed = b["seed"].is_number_unsigned() ? b["seed"].get<uint64_t>() : static_cast<uint64_t>(b["seed"].get<int64_t>());
  } else {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    s.seed = rng();
  }
  // max_completion_tokens is the current name; max_tokens the older one.
  const char* mt = present(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  p.gen.max_tokens = static_cast<int>(integer(b, mt, -1, 1, ctx.model.n_ctx));
  p.gen.ignore_eos = boolean(b, "ignore_eos", false);
  if (present(b, "n") && integer(b, "n", 1, 1, 1 << 20) != 1) unsupported("n", "n other than 1");
  if (present(b, "best_of") && integer(b, "best_of", 1, 1, 1 << 20) != 1) unsupported("best_of", "best_of other than 1");
  if (present(b, "stop")) {
    const json& v = b["stop"];
    if (v.is_string()) p.gen.stop.push_back(v.get<std::string>());
    else if (v.is_array()) {
      for (const json& x : v) {
        if (!x.is_string()) bad_value("stop", "expected a string or an array of strings");
        p.gen.stop.push_back(x.get<std::string>());
      }
    } else {
      bad_value("stop", "expected a string or an array of strings");
    }
    if (p.gen.stop.size() > 16) bad_value("stop", strf("at most 16 stop strings (got %zu)", p.gen.stop.size()));
    for (const auto& x : p.gen.stop)
      if (x.empty()) bad_value("stop", "stop strings must not be empty");
  }
  p.stream = boolean(b, "stream", false);
  if (present(b, "stream_options")) {
    const json& so = b["stream_options"];
    if (!so.is_object()) bad_value("stream_options", "expected an object");
    if (!p.stream) bad_value("stream_options", "only allowed when 'stream' is true");
    p.include_usage = boolean(so, "include_usage", false);
  }
  return p;
}

void check_fits(const ParsedRequest& p, const ApiContext& ctx, const char* param) {
  const int64_t n = static_cast<int64_t>(p.gen.prompt.size());
  const int64_t need = n + std::max(p.gen.max_tokens, 1);
  if (need > ctx.model.n_ctx)
    api_fail(400, param, "context_length_exceeded",
             strf("this model's maximum context length is %lld tokens, but the request needs %lld (%lld in the "
                  "prompt + %d to generate); shorten the prompt or lower max_tokens",
                  static_cast<long long>(ctx.model.n_ctx), static_cast<long long>(need), static_cast<long long>(n),
                  std::max(p.gen.max_tokens, 1)));
}

std::vector<int32_t> encode_prompt(const ApiContext& ctx, const std::string& text) {
  std::vector<int32_t> ids;
  try {
    ids = ctx.tok.encode(text, /*parse_special=*/true);
  } catch (const Error& e) {
    api_fail(400, "", "invalid_value", std::string("the prompt cannot be tokenized: ") + e.what());
  }
  if (ctx.tok.add_bos() && ctx.tok.bos_id() >= 0) ids.insert(ids.begin(), ctx.tok.bos_id());
  return ids;
}

}  // namespace

ParsedRequest parse_chat_request(const json& b, const ApiContext& ctx) {
  ParsedRequest p = parse_common(b, ctx);
  // logprobs: true|false; top_logprobs: 0..20, only with logprobs.
  if (boolean(b, "logprobs", false)) p.gen.top_logprobs = static_cast<int>(integer(b, "top_logprobs", 0, 0, 20));
  else if (present(b, "top_logprobs")) bad_value("top_logprobs", "only allowed when 'logprobs' is true");
  if (!ctx.chat_template) api_fail(400, "messages", "", "the model has no chat template; use /v1/completions");
  if (!present(b, "messages")) api_fail(400, "messages", "missing_required_parameter", "'messages' is required");
  const json& msgs = b["messages"];
  if (!msgs.is_array() || msgs.empty()) bad_value("messages", "expected a non-empty array of messages");
  json messages = json::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    const std::string where = strf("messages[%zu]", i);
    if (!m.is_object()) bad_value(where, "expected an object");
    if (!m.contains("role") || !m["role"].is_string()) bad_value(where + ".role", "expected a string");
    json copy = m;
    const std::string role = m["role"].get<std::string>();
    if (role == "developer") copy["role"] = "system";  // OpenAI's newer name for the system role
    else if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad_value(where + ".role", "'" + role + "' is not one of system, developer, user, assistant, tool");
    if (m.contains("content") && !m["content"].is_null() && !m["content"].is_string() && !m["content"].is_array())
      bad_value(where + ".content", "expected a string or an array of content parts");
    if (role == "assistant" && present(m, "tool_calls")) {
      // OpenAI sends arguments as a JSON string; templates index them as a mapping.
      if (!m["tool_calls"].is_array()) bad_value(where + ".tool_calls", "expected an array");
      for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
        const std::string w = where + strf(".tool_calls[%zu]", k);
        const json& tc = m["tool_calls"][k];
        if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object() ||
            !tc["function"].contains("name") || !tc["function"]["name"].is_string())
          bad_value(w, "expected {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
        const json& args = tc["function"].contains("arguments") ? tc["function"]["arguments"] : json(nullptr);
        json obj = json::object();
        if (args.is_string()) {
          obj = json::parse(args.get<std::string>(), nullptr, false);
          if (obj.is_discarded() || !obj.is_object())
            bad_value(w + ".function.arguments", "expected a JSON object encoded as a string");
        } else if (args.is_object()) {
          obj = args;
        } else if (!args.is_null()) {
          bad_value(w + ".function.arguments", "expected a JSON object encoded as a string");
        }
        copy["tool_calls"][k]["function"]["arguments"] = obj;
      }
    }
    if (role == "tool" && m.contains("content") && !m["content"].is_string() && !m["content"].is_array())
      bad_value(where + ".content", "a tool message needs content");
    if (m.contains("content") && m["content"].is_array())
      for (const json& part : m["content"])
        if (!part.is_object() || !(part.contains("type") && part["type"] == "text") || !part.contains("text") || !part["text"].is_string())
          api_fail(400, where + ".content", "unsupported_content",
                   "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
    messages.push_back(std::move(copy));
  }
  json tools = nullptr;
  if (present(b, "tools")) {
    if (!b["tools"].is_array()) bad_value("tools", "expected an array of tools");
    for (size_t i = 0; i < b["tools"].size(); ++i) {
      if (const auto e = check_tool_definition(b["tools"][i]))
        bad_value(strf("tools[%zu]", i) + e->field, "expected " + e->expected);
    }
    if (!b["tools"].empty()) tools = b["tools"];
  }
  // tool_choice "required" / a named function: the answer is made to start a tool call (of that function) by
  // appending the opening of the call to the prompt; the server puts it back in front of the answer.
  bool force_call = false;
  std::string forced_name;
  if (present(b, "tool_choice")) {
    const json& tc = b["tool_choice"];
    if (tc == "none") {
      tools = nullptr;  // the model is not told about the tools
    } else if (tc == "auto") {
    } else if (tc == "required" || tc.is_object()) {
      if (tools.is_null()) bad_value("tool_choice", "needs 'tools'");
      force_call = true;
      if (tc.is_object()) {
        if (!tc.contains("function") || !tc["function"].is_object() || !tc["function"].contains("name") ||
            !tc["function"]["name"].is_string())
          bad_value("tool_choice", "expected {\"type\": \"function\", \"function\": {\"name\": ...}}");
        forced_name = tc["function"]["name"].get<std::string>();
        if (std::none_of(tools.begin(), tools.end(), [&](const json& t) { return t["function"]["name"] == forced_name; }))
          bad_value("tool_choice", "'" + forced_name + "' is not one of the tools");
      }
    } else {
      bad_value("tool_choice", "expected \"none\", \"auto\", \"required\" or an object");
    }
  }
  p.tools = tools;
  std::string reasoning_format = ctx.reasoning_format;
  if (present(b, "reasoning_format")) {
    if (!b["reasoning_format"].is_string()) bad_value("reasoning_format", "expected \"none\" or \"auto\"");
    reasoning_format = b["reasoning_format"].get<std::string>();
    if (reasoning_format != "none" && reasoning_format != "auto")
      bad_value("reasoning_format", "'" + reasoning_format + "' is not one of none, auto");
  }
  if (present(b, "response_format")) {
    const json& rf = b["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      bad_value("response_format", "expected an object with a 'type'");
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      p.gen.json_object = true;
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object() || !rf["json_schema"].contains("schema"))
        bad_value("response_format", "json_schema needs {\"json_schema\": {\"name\", \"schema\"}}");
      const std::string why = check_schema(rf["json_schema"]["schema"]);
      if (!why.empty()) api_fail(400, "response_format", "unsupported_parameter", "json_schema: " + why);
      p.gen.json_object = true;
      p.gen.json_schema = rf["json_schema"]["schema"];
    } else if (type != "text") bad_value("response_format", "'" + type + "' is not one of text, json_object, json_schema");
  }
  json extra = nullptr;
  if (present(b, "chat_template_kwargs")) {
    if (!b["chat_template_kwargs"].is_object()) bad_value("chat_template_kwargs", "expected an object");
    extra = b["chat_template_kwargs"];
  }
  // The conversation continued turn by turn (each earlier answer as it followed its own prompt), so a follow-up
  // turn extends the previous turn's tokens and resumes from its answer-end snapshot in the prefix cache.
  std::vector<std::string> pieces;
  try {
    pieces = ctx.chat_template->render_turns(messages, tools, extra, ctx.turns);
  } catch (const Error& e) {
    api_fail(400, "messages", "invalid_value", std::string("the chat template rejected the messages: ") + e.what());
  }
  std::string rendered;
  for (const std::string& piece : pieces) rendered += piece;
  // A think block the prompt leaves open is the answer's reasoning, up to </think>; otherwise the answer may open
  // one itself (GLM-4.5/4.6 templates end the prompt before it).
  const bool think_open = prompt_opens_think(rendered);
  // A forced call closes the think block itself; that text is not part of the answer's content.
  p.reasoning = think_open && (reasoning_format == "auto" || force_call) ? Reasoning::kOpen
                : reasoning_format == "auto"                           ? Reasoning::kMaybe
                                                                       : Reasoning::kOff;
  p.tool_format = ctx.tool_format;
  if (force_call) {  // "required": the name must be one of the tools
    ForcedCall fc = forced_tool_call(ctx.tool_format, think_open, forced_name, tools);
    p.forced_text = fc.text;
    pieces.back() += p.forced_text;
    p.gen.choice = std::move(fc.choice);
  }
  try {
    p.gen.prompt = text::encode_turns(ctx.tok, pieces);
  } catch (const Error& e) {
    api_fail(400, "messages", "invalid_value", std::string("the prompt cannot be tokenized: ") + e.what());
  }
  check_fits(p, ctx, "messages");
  return p;
}

ParsedRequest parse_completion_request(const json& b, const ApiContext& ctx) {
  ParsedRequest p = parse_common(b, ctx);
  // Legacy completions: logprobs is the number of alternatives, 0..5 (null: off).
  if (present(b, "logprobs")) p.gen.top_logprobs = static_cast<int>(integer(b, "logprobs", 0, 0, 5));
  if (boolean(b, "echo", false)) unsupported("echo", "echo");
  if (present(b, "suffix")) unsupported("suffix", "suffix");
  if (!present(b, "prompt")) api_fail(400, "prompt", "missing_required_parameter", "'prompt' is required");
  const json& pr = b["prompt"];
  // A string, a one-element array of strings, token ids, or a one-element array of token-id arrays.
  auto from_ids = [&](const json& arr) {
    std::vector<int32_t> ids;
    for (const json& x : arr) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= ctx.tok.n_vocab())
        bad_value("prompt", "token ids must be integers in [0, " + std::to_string(ctx.tok.n_vocab()) + ")");
      ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
    return ids;
  };
  if (pr.is_string()) {
    p.gen.prompt = encode_prompt(ctx, pr.get<std::string>());
  } else if (pr.is_array() && !pr.empty() && pr[0].is_number()) {
    p.gen.prompt = from_ids(pr);
  } else if (pr.is_array() && pr.size() == 1 && pr[0].is_string()) {
    p.gen.prompt = encode_prompt(ctx, pr[0].get<std::string>());
  } else if (pr.is_array() && pr.size() == 1 && pr[0].is_array()) {
    p.gen.prompt = from_ids(pr[0]);
  } else if (pr.is_array() && pr.size() > 1) {
    unsupported("prompt", "more than one prompt per request");
  } else {
    bad_value("prompt", "expected a string, an array of token ids, or a one-element array of either");
  }
  if (p.gen.prompt.empty()) bad_value("prompt", "the prompt is empty");
  check_fits(p, ctx, "prompt");
  return p;
}

json usage_json(int64_t n_prompt, int64_t n_completion, int64_t n_cached) {
  return json{{"prompt_tokens", n_prompt},
              {"completion_tokens", n_completion},
              {"total_tokens", n_prompt + n_completion},
              {"prompt_tokens_details", {{"cached_tokens", n_cached}}}};
}

json chat_logprobs(const std::vector<TokenLogprob>& lps, const text::Tokenizer& tok) {
  auto entry = [&](int32_t id, float lp) {
    const std::string t = tok.token_bytes(id);
    json bytes = json::array();
    for (unsigned char ch : t) bytes.push_back(static_cast<int>(ch));
    return json{{"token", t}, {"logprob", lp}, {"bytes", bytes}};
  };
  json content = json::array();
  for (const TokenLogprob& x : lps) {
    json e = entry(x.id, x.logprob);
    json top = json::array();
    for (const auto& [id, lp] : x.top) top.push_back(entry(id, lp));
    e["top_logprobs"] = top;
    content.push_back(std::move(e));
  }
  return json{{"content", content}};
}

json completion_logprobs(const std::vector<TokenLogprob>& lps, const text::Tokenizer& tok, size_t text_offset0) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  size_t off = text_offset0;
  for (const TokenLogprob& x : lps) {
    const std::string t = tok.token_bytes(x.id);
    tokens.push_back(t);
    token_logprobs.push_back(x.logprob);
    json alt = json::object();
    for (const auto& [id, lp] : x.top) alt[tok.token_bytes(id)] = lp;
    top.push_back(std::move(alt));
    offsets.push_back(off);
    off += t.size();
  }
  return json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = json::object();
    if (with_index) c["index"] = i;
    c["id"] = strf("call_%016llx", static_cast<unsigned long long>(rng()));
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", to_text(calls[i].arguments)}};
    out.push_back(std::move(c));
  }
  return out;
}

static json finish_json(Finish f) { return f == Finish::kNone ? json(nullptr) : json(finish_name(f)); }

json chat_response(const std::string& id, int64_t created, const std::string& model, const json& message,
                   Finish finish, const json& usage, const json& logprobs) {
  json choice{{"index", 0},
              {"message", message},
              {"logprobs", logprobs},
              {"finish_reason", finish_json(finish)}};
  return json{{"id", id},           {"object", "chat.completion"}, {"created", created},
              {"model", model},     {"choices", json::array({choice})},
              {"usage", usage}};
}

json completion_response(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                         Finish finish, const json& usage, const json& logprobs) {
  json choice{{"index", 0}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish_json(finish)}};
  return json{{"id", id},           {"object", "text_completion"}, {"created", created},
              {"model", model},     {"choices", json::array({choice})},
              {"usage", usage}};
}

json chat_chunk(const std::string& id, int64_t created, const std::string& model, const json& delta, Finish finish,
                const json& logprobs) {
  json choice{{"index", 0}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish_json(finish)}};
  return json{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
              {"choices", json::array({choice})}};
}

json completion_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                      Finish finish, const json& logprobs) {
  json choice{{"index", 0}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish_json(finish)}};
  return json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
              {"choices", json::array({choice})}};
}

json usage_chunk(const std::string& object, const std::string& id, int64_t created, const std::string& model,
                 const json& usage) {
  return json{{"id", id},       {"object", object},          {"created", created},
              {"model", model}, {"choices", json::array()}, {"usage", usage}};
}

}  // namespace tern::serve
