#include "serve/chat_output.h"

#include <algorithm>

namespace tern::serve {

using json = nlohmann::ordered_json;

namespace {

const std::string kThinkOpen = "<think>", kThinkEnd = "</think>";
const std::string kToolOpen = "<tool_call>", kToolClose = "</tool_call>";
const std::string kFunction = "<function=", kFunctionEnd = "</function>";
const std::string kParam = "<parameter=", kParamEnd = "</parameter>";
const std::string kArgKey = "<arg_key>", kArgKeyEnd = "</arg_key>";
const std::string kArgValue = "<arg_value>", kArgValueEnd = "</arg_value>";
constexpr const char* kSpace = " \n\t\r";

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; });
}

// The declared JSON-schema type of a tool's parameter ("" when unknown).
std::string param_type(const json& tools, const std::string& fn, const std::string& param) {
  if (!tools.is_array()) return "";
  for (const json& t : tools) {
    const json* f = t.contains("function") ? &t["function"] : &t;
    if (!f->is_object() || f->value("name", "") != fn) continue;
    const json& props = f->contains("parameters") && (*f)["parameters"].is_object()
                            ? (*f)["parameters"].value("properties", json::object())
                            : json::object();
    if (props.is_object() && props.contains(param) && props[param].is_object() && props[param].contains("type") &&
        props[param]["type"].is_string())
      return props[param]["type"].get<std::string>();
  }
  return "";
}

// A parameter's value as the model wrote it, typed by the tool's schema: a string parameter's text is the string
// (templates write strings as they are), anything else is JSON when it parses, else the text.
json typed_value(const json& tools, const std::string& fn, const std::string& param, const std::string& value) {
  if (param_type(tools, fn, param) == "string") return value;
  json v = json::parse(value, nullptr, /*allow_exceptions=*/false);
  return v.is_discarded() ? json(value) : v;
}

// One block's body: <function=NAME>\n<parameter=P>\nVALUE\n</parameter>...</function>. False if there is no name.
bool parse_block(const std::string& body, const json& tools, ToolCall* call) {
  size_t f = body.find(kFunction);
  if (f == std::string::npos) return false;
  size_t gt = body.find('>', f);
  if (gt == std::string::npos) return false;
  call->name = body.substr(f + kFunction.size(), gt - f - kFunction.size());
  if (call->name.empty() || call->name.find('\n') != std::string::npos) return false;
  call->arguments = json::object();
  size_t pos = gt + 1;
  for (;;) {
    size_t p = body.find(kParam, pos);
    if (p == std::string::npos) break;
    size_t pgt = body.find('>', p);
    if (pgt == std::string::npos) break;
    const std::string name = body.substr(p + kParam.size(), pgt - p - kParam.size());
    size_t end = body.find(kParamEnd, pgt);
    std::string value = body.substr(pgt + 1, end == std::string::npos ? std::string::npos : end - pgt - 1);
    if (!value.empty() && value.front() == '\n') value.erase(0, 1);
    if (!value.empty() && value.back() == '\n') value.pop_back();
    call->arguments[name] = typed_value(tools, call->name, name, value);
    if (end == std::string::npos) break;
    pos = end + kParamEnd.size();
  }
  return true;
}

size_t skip_space(const std::string& s, size_t p) {
  const size_t q = s.find_first_not_of(kSpace, p);
  return q == std::string::npos ? s.size() : q;
}

bool has_arg_tag(const std::string& s) {
  return s.find("<arg_") != std::string::npos || s.find("</arg_") != std::string::npos;
}

// One GLM block's body: NAME, then (<arg_key>K</arg_key><arg_value>V</arg_value>)*, whitespace allowed between the
// parts (GLM-4.5/4.6 write newlines there, GLM-4.7/5 nothing). False when anything else is there (text outside the
// tags, a key without its value, an arg tag inside a key or value: a tag the model left out), so that a malformed
// block is shown as the text it is instead of as a call with made-up arguments.
bool parse_block_glm(const std::string& body, const json& tools, ToolCall* call) {
  size_t pos = body.find(kArgKey);
  if (pos == std::string::npos) pos = body.size();
  const size_t b = body.find_first_not_of(kSpace), e = body.find_last_not_of(kSpace, pos == 0 ? 0 : pos - 1);
  if (b == std::string::npos || b >= pos) return false;
  call->name = body.substr(b, e - b + 1);
  if (call->name.find_first_of("<>\n\r\t ") != std::string::npos) return false;
  call->arguments = json::object();
  for (;;) {
    pos = skip_space(body, pos);
    if (pos == body.size()) return true;
    if (body.compare(pos, kArgKey.size(), kArgKey) != 0) return false;
    const size_t k0 = pos + kArgKey.size(), k1 = body.find(kArgKeyEnd, k0);
    if (k1 == std::string::npos) return false;
    const std::string key = body.substr(k0, k1 - k0);
    if (key.empty() || has_arg_tag(key)) return false;
    pos = skip_space(body, k1 + kArgKeyEnd.size());
    if (body.compare(pos, kArgValue.size(), kArgValue) != 0) return false;
    const size_t v0 = pos + kArgValue.size(), v1 = body.find(kArgValueEnd, v0);
    if (v1 == std::string::npos) return false;
    const std::string value = body.substr(v0, v1 - v0);
    if (has_arg_tag(value)) return false;
    call->arguments[key] = typed_value(tools, call->name, key, value);
    pos = v1 + kArgValueEnd.size();
  }
}

}  // namespace

ToolCallFormat tool_call_format_of(const std::string& template_src, std::string* why) {
  if (template_src.find(kArgKey) != std::string::npos) {
    if (why) *why = "the chat template writes " + kArgKey;
    return ToolCallFormat::kGlm;
  }
  if (why)
    *why = template_src.find(kFunction) != std::string::npos
               ? "the chat template writes " + kFunction
               : "the chat template writes neither " + kArgKey + " nor " + kFunction + "; the default";
  return ToolCallFormat::kQwen;
}

bool prompt_opens_think(const std::string& prompt) {
  const size_t open = prompt.rfind(kThinkOpen), close = prompt.rfind(kThinkEnd);
  return open != std::string::npos && (close == std::string::npos || close < open);
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kQwen: return "qwen (<tool_call><function=NAME><parameter=P>V</parameter>...)";
    case ToolCallFormat::kGlm: return "glm (<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...)";
  }
  return "?";
}

ForcedCall forced_tool_call(ToolCallFormat f, bool think_open, const std::string& name, const json& tools) {
  ForcedCall fc;
  // What follows the name must end the name: Qwen's `>\n`; GLM's next token is <arg_key> or </tool_call>.
  const std::string after_name = f == ToolCallFormat::kGlm ? "" : ">\n";
  if (f == ToolCallFormat::kGlm)  // GLM-4.7/5 templates write `</think>` right before what follows it
    fc.text = std::string(think_open ? kThinkEnd : "") + kToolOpen;
  else
    fc.text = std::string(think_open ? "\n" + kThinkEnd + "\n\n" : "") + kToolOpen + "\n" + kFunction;
  if (!name.empty()) {
    fc.text += name + after_name;
  } else if (tools.is_array()) {
    for (const json& t : tools)
      if (t.is_object() && t.contains("function") && t["function"].is_object() && t["function"].contains("name") &&
          t["function"]["name"].is_string())
        fc.choice.push_back(t["function"]["name"].get<std::string>() + after_name);
  }
  return fc;
}

std::optional<ToolDefinitionError> check_tool_definition(const json& t) {
  // Compare the values themselves: json::value("type", "") throws when the key holds an object or a number.
  if (!t.is_object() || !(t.contains("type") && t["type"] == "function") || !t.contains("function") ||
      !t["function"].is_object())
    return ToolDefinitionError{"", "{\"type\": \"function\", \"function\": {...}}"};
  const json& f = t["function"];
  if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
    return ToolDefinitionError{".function.name", "a non-empty string"};
  if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
    return ToolDefinitionError{".function.parameters", "a JSON schema object"};
  return std::nullopt;
}

std::vector<ToolCall> parse_tool_calls(const std::string& text, const json& tools, std::string* rest,
                                       ToolCallFormat format) {
  std::vector<ToolCall> calls;
  size_t pos = 0;
  for (;;) {
    size_t p = text.find(kToolOpen, pos);
    if (p == std::string::npos) break;
    const std::string between = text.substr(pos, p - pos);
    if (!blank(between)) *rest += between;
    size_t end = text.find(kToolClose, p);
    const size_t body0 = p + kToolOpen.size();
    const std::string body = text.substr(body0, end == std::string::npos ? std::string::npos : end - body0);
    ToolCall call;
    const bool ok = format == ToolCallFormat::kGlm ? end != std::string::npos && parse_block_glm(body, tools, &call)
                                                   : parse_block(body, tools, &call);
    if (ok) calls.push_back(std::move(call));
    else *rest += text.substr(p, end == std::string::npos ? std::string::npos : end + kToolClose.size() - p);
    if (end == std::string::npos) return calls;
    pos = end + kToolClose.size();
  }
  const std::string tail = text.substr(pos);
  if (!blank(tail) || calls.empty()) *rest += tail;
  return calls;
}

ChatOutputSplitter::ChatOutputSplitter(Reasoning reasoning, json tools, ToolCallFormat format)
    : state_(reasoning == Reasoning::kOpen    ? State::kReasoning
             : reasoning == Reasoning::kMaybe ? State::kThinkStart
                                              : State::kContent),
      tools_(tools.is_array() && !tools.empty()),
      tool_defs_(std::move(tools)),
      format_(format) {}

std::string ChatOutputSplitter::take_safe(const std::string& tag) {
  size_t keep = 0;
  for (size_t k = std::min(tag.size() - 1, buf_.size()); k > 0; --k)
    if (buf_.compare(buf_.size() - k, k, tag, 0, k) == 0) {
      keep = k;
      break;
    }
  std::string out = buf_.substr(0, buf_.size() - keep);
  buf_.erase(0, buf_.size() - keep);
  return out;
}

ChatDelta ChatOutputSplitter::push(const std::string& piece) {
  ChatDelta d;
  buf_ += piece;
  for (;;) {
    switch (state_) {
      case State::kThinkStart: {  // leading whitespace, then <think> opens reasoning; anything else is content
        const size_t p = buf_.find_first_not_of(kSpace);
        if (p == std::string::npos) return d;
        const size_t n = std::min(buf_.size() - p, kThinkOpen.size());
        if (buf_.compare(p, n, kThinkOpen, 0, n) == 0) {
          if (n < kThinkOpen.size()) return d;  // may still become <think>
          buf_.erase(0, p + kThinkOpen.size());
          state_ = State::kReasoning;
          continue;
        }
        buf_.erase(0, p);  // the whitespace before the content is layout (GLM-4.6: "\n" after the prompt's think block)
        state_ = State::kContent;
        continue;
      }
      case State::kReasoning: {
        size_t p = buf_.find(kThinkEnd);
        if (p == std::string::npos) {
          d.reasoning += take_safe(kThinkEnd);
          return d;
        }
        d.reasoning += buf_.substr(0, p);
        buf_.erase(0, p + kThinkEnd.size());
        state_ = State::kContentStart;
        continue;
      }
      case State::kContentStart: {  // the newlines after </think> belong to neither part
        size_t p = buf_.find_first_not_of("\n");
        if (p == std::string::npos) {
          buf_.clear();
          return d;
        }
        buf_.erase(0, p);
        state_ = State::kContent;
        continue;
      }
      case State::kContent: {
        if (!tools_) {
          d.content += buf_;
          buf_.clear();
          return d;
        }
        // Whitespace is held back too: before a tool call it is not content.
        size_t p = buf_.find(kToolOpen);
        if (p == std::string::npos) {
          std::string safe = take_safe(kToolOpen);
          const size_t e = safe.find_last_not_of(" \n\t\r");
          const size_t cut = e == std::string::npos ? 0 : e + 1;
          d.content += safe.substr(0, cut);
          buf_.insert(0, safe.substr(cut));
          return d;
        }
        std::string before = buf_.substr(0, p);
        const size_t e = before.find_last_not_of(" \n\t\r");
        d.content += before.substr(0, e == std::string::npos ? 0 : e + 1);
        buf_.erase(0, p);
        state_ = State::kToolCalls;
        continue;
      }
      case State::kToolCalls:
        tool_text_ += buf_;
        buf_.clear();
        return d;
    }
  }
}

ChatDelta ChatOutputSplitter::finish(std::vector<ToolCall>* calls) {
  ChatDelta d;
  if (state_ == State::kReasoning) d.reasoning += buf_;
  else if (state_ == State::kContent || state_ == State::kThinkStart) d.content += buf_;
  else if (state_ == State::kToolCalls) tool_text_ += buf_;
  buf_.clear();
  if (!tool_text_.empty()) {
    std::string rest;
    *calls = parse_tool_calls(tool_text_, tool_defs_, &rest, format_);
    d.content += rest;
    tool_text_.clear();
  }
  return d;
}

}  // namespace tern::serve
