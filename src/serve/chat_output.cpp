#include "serve/chat_output.h"

#include <algorithm>

namespace tern::serve {

using json = nlohmann::ordered_json;

namespace {

const std::string kThinkEnd = "</think>";
const std::string kToolOpen = "<tool_call>", kToolClose = "</tool_call>";
const std::string kFunction = "<function=", kFunctionEnd = "</function>";
const std::string kParam = "<parameter=", kParamEnd = "</parameter>";

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
    const std::string type = param_type(tools, call->name, name);
    json v = type == "string" ? json(nullptr) : json::parse(value, nullptr, /*allow_exceptions=*/false);
    call->arguments[name] = type == "string" || v.is_discarded() ? json(value) : v;
    if (end == std::string::npos) break;
    pos = end + kParamEnd.size();
  }
  return true;
}

}  // namespace

std::vector<ToolCall> parse_tool_calls(const std::string& text, const json& tools, std::string* rest) {
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
    if (parse_block(body, tools, &call)) calls.push_back(std::move(call));
    else *rest += text.substr(p, end == std::string::npos ? std::string::npos : end + kToolClose.size() - p);
    if (end == std::string::npos) return calls;
    pos = end + kToolClose.size();
  }
  const std::string tail = text.substr(pos);
  if (!blank(tail) || calls.empty()) *rest += tail;
  return calls;
}

ChatOutputSplitter::ChatOutputSplitter(bool reasoning, json tools)
    : state_(reasoning ? State::kReasoning : State::kContent),
      tools_(tools.is_array() && !tools.empty()),
      tool_defs_(std::move(tools)) {}

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
  else if (state_ == State::kContent) d.content += buf_;
  else if (state_ == State::kToolCalls) tool_text_ += buf_;
  buf_.clear();
  if (!tool_text_.empty()) {
    std::string rest;
    *calls = parse_tool_calls(tool_text_, tool_defs_, &rest);
    d.content += rest;
    tool_text_.clear();
  }
  return d;
}

}  // namespace tern::serve
