#include "serve/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>
#include <thread>
#include <tuple>

#include "core/error.h"
#include "core/log.h"
#include "serve/anthropic.h"
#include "serve/web_page.h"

namespace tern::serve {

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return std::string(prefix) + buf;
}

void set_json(httplib::Response& res, const json& j) { res.set_content(to_text(j), "application/json"); }

ApiError error_of(int status, const std::string& message, const std::string& type) {
  ApiError e;
  e.status = status;
  e.message = message;
  e.type = type;
  return e;
}

// Counts a generation request from its admission until its response has been written (or abandoned): the guard
// lives in the response's content provider, which httplib destroys when the response is done.
struct InFlight {
  std::atomic<int>& n;
  explicit InFlight(std::atomic<int>& n_) : n(n_) { ++n; }
  ~InFlight() { --n; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
};

// The forced opening of a tool call (put in front of the answer) through the splitter: it closes an empty think
// block, which is not shown.
ChatDelta push_forced(ChatOutputSplitter& split, const std::string& forced) {
  ChatDelta d = split.push(forced);
  d.reasoning.clear();
  return d;
}

// A whole (not streamed) answer split as a stream would be: reasoning, content and the tool calls.
ChatDelta split_answer(ChatOutputSplitter& split, const std::string& forced, const std::string& text,
                       std::vector<ToolCall>* calls) {
  ChatDelta d = push_forced(split, forced);
  const ChatDelta rest = split.push(text);
  const ChatDelta tail = split.finish(calls);
  d.reasoning += rest.reasoning + tail.reasoning;
  d.content += rest.content + tail.content;
  return d;
}

// Not streaming: waits for the whole answer, sending a space (JSON allows leading whitespace) every second so a
// client that left is noticed. False when it left.
bool wait_whole(Completion& c, httplib::DataSink& sink, std::string* text, std::vector<TokenLogprob>* lps) {
  auto last = clock::now();
  while (!c.wait(text, 100ms, lps)) {
    if (clock::now() - last > 1s) {
      if (!sink.write(" ", 1)) return false;
      last = clock::now();
    }
  }
  return true;
}

// Anthropic's routes answer errors in Anthropic's shape.
bool anthropic_route(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

}  // namespace

bool same_secret(std::string_view given, std::string_view secret) {
  // Every byte of the secret is visited whatever `given` holds; volatile keeps the compiler from ending early.
  volatile unsigned char diff = given.size() != secret.size();
  for (size_t i = 0; i < secret.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = diff | (g ^ static_cast<unsigned char>(secret[i]));
  }
  return diff == 0;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0 ||
         host.rfind("::ffff:127.", 0) == 0;
}

std::string exposure_warning(const std::string& host, const std::string& api_key) {
  if (is_loopback_host(host) || !api_key.empty()) return "";
  return "listening on " + host + " without --api-key: anyone who can reach this address can use the model "
         "(pass --api-key KEY, or --host 127.0.0.1 to serve this machine only)";
}

Server::Server(const ServerOptions& o, Scheduler& sched, const text::Tokenizer& tok, const text::ChatTemplate* tpl,
               ModelInfo model)
    : o_(o), sched_(sched), tok_(tok), tpl_(tpl), model_(std::move(model)), http_(std::make_unique<httplib::Server>()) {
  if (o_.port < 0 || o_.port > 65535) fail("--port must be in [0, 65535] (got %d)", o_.port);
  if (o_.reasoning_format != "none" && o_.reasoning_format != "auto")
    fail("--reasoning-format '%s' is not supported (supported: none, auto)", o_.reasoning_format.c_str());
  if (o_.http_threads < 0) fail("--http-threads must be >= 0 (got %d)", o_.http_threads);
  int n = o_.http_threads;
  if (n == 0) {
    n = std::max(64, 8 * sched_.parallel());
    log::info("HTTP worker threads: %d (max(64, 8 x --parallel); each open client connection holds one)", n);
  }
  http_->new_task_queue = [n] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
  http_->set_payload_max_length(kMaxBodyBytes);
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second server bind the same port
  // and silently take half of its connections.
  http_->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  if (tpl_) {
    std::string why;
    tool_format_ = tool_call_format_of(tpl_->source(), &why);
    log::info("chat: tool calls parsed in the %s form (%s)", tool_call_format_name(tool_format_), why.c_str());
  }
  routes();
}

Server::~Server() = default;

void Server::stop() { http_->stop(); }

void Server::drain(std::chrono::milliseconds grace) {
  draining_ = true;
  const auto deadline = clock::now() + grace;
  while (in_flight_ > 0 && !forced_ && clock::now() < deadline) std::this_thread::sleep_for(20ms);
  if (in_flight_ > 0) {
    log::warn("%s: cancelling %d unfinished request(s)", forced_ ? "second signal" : "shutdown grace period over",
              in_flight_.load());
    sched_.cancel_all();
    // Cancelled requests end at the scheduler's next step; their clients get what was generated.
    const auto cut = clock::now() + 5s;
    while (in_flight_ > 0 && clock::now() < cut) std::this_thread::sleep_for(20ms);
  }
  stop();
}

void Server::run() {
  int port = o_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(o_.host);
    if (port <= 0) fail("cannot listen on %s (any port)", o_.host.c_str());
  } else if (!http_->bind_to_port(o_.host, port)) {
    fail("cannot listen on %s:%d (is the port in use, or the address not local?)", o_.host.c_str(), port);
  }
  port_ = port;
  if (const std::string w = exposure_warning(o_.host, o_.api_key); !w.empty()) log::warn("%s", w.c_str());
  log::info("serving '%s' on http://%s:%d (%d sequences of %lld tokens, prefix cache %zu MiB%s)", model_.id.c_str(),
            o_.host.c_str(), port, sched_.parallel(), static_cast<long long>(model_.n_ctx),
            sched_.stats().cache.budget >> 20, o_.api_key.empty() ? "" : ", API key required");
  http_->listen_after_bind();
}

void Server::count(const std::string& endpoint) {
  std::lock_guard lk(stats_m_);
  ++requests_[endpoint];
}

void Server::routes() {
  auto reply_error = [this](httplib::Response& res, const ApiError& e, bool anthropic = false) {
    res.status = e.status;
    if (e.retry_after > 0) res.set_header("Retry-After", std::to_string(e.retry_after));
    set_json(res, anthropic ? anthropic_error_body(e) : e.body());
    std::lock_guard lk(stats_m_);
    ++errors_[e.status];
  };
  // Every POST route reads its body itself (httplib would refuse form-encoded bodies over 8 KiB, which is what
  // `curl -d` sends) and maps errors: ApiError -> its status; tern::Error (bad input found deeper) -> 400;
  // anything else -> 500.
  using PostFn = std::function<void(const std::string& body, httplib::Response&)>;
  auto post = [this, reply_error](const char* path, PostFn fn) {
    const bool anthropic = anthropic_route(path);
    http_->Post(path, [reply_error, fn, anthropic](const httplib::Request& req, httplib::Response& res,
                                                   const httplib::ContentReader& reader) {
      try {
        if (req.is_multipart_form_data())
          api_fail(400, "", "invalid_json", "expected a JSON body, got multipart form data");
        // httplib refuses a Content-Length over the limit (413); a chunked body is counted here.
        std::string body;
        bool too_large = false;
        const bool read = reader([&](const char* data, size_t n) {
          if (body.size() + n > kMaxBodyBytes) return !(too_large = true);
          body.append(data, n);
          return true;
        });
        if (!read || too_large) {
          const int status = res.status == 413 || too_large ? 413 : 400;
          api_fail(status, "", "", status == 413 ? strf("the request body is too large (over %zu MiB)", kMaxBodyBytes >> 20)
                                                 : "the request body could not be read");
        }
        fn(body, res);
      } catch (const ApiError& e) {
        reply_error(res, e, anthropic);
      } catch (const Error& e) {
        reply_error(res, error_of(400, e.what(), "invalid_request_error"), anthropic);
      } catch (const std::exception& e) {
        log::error("%s %s: %s", req.method.c_str(), req.path.c_str(), e.what());
        reply_error(res, error_of(500, std::string("internal error: ") + e.what(), "server_error"), anthropic);
      }
    });
  };

  // Header limits first (before the key: a client is told what is wrong with its request), then the API key on
  // every route but the static page and /health.
  http_->set_pre_routing_handler([this, reply_error](const httplib::Request& req, httplib::Response& res) {
    size_t header_bytes = 0;
    for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;  // "K: V\r\n"
    if (req.headers.size() > kMaxHeaderCount || header_bytes > kMaxHeaderBytes) {
      ApiError e = error_of(400, strf("the request headers are too large (%zu headers, %zu bytes; at most %zu headers, "
                                      "%zu KiB)", req.headers.size(), header_bytes, kMaxHeaderCount, kMaxHeaderBytes >> 10),
                            "invalid_request_error");
      e.code = "headers_too_large";
      reply_error(res, e, anthropic_route(req.path));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (o_.api_key.empty() || req.path == "/" || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    // OpenAI clients send `Authorization: Bearer KEY`, Anthropic's `x-api-key: KEY`; either will do on any route.
    const std::string h = req.get_header_value("Authorization");
    const bool has_x = req.has_header("x-api-key");
    if (h.rfind("Bearer ", 0) == 0 && same_secret(h.substr(7), o_.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    if (has_x && same_secret(req.get_header_value("x-api-key"), o_.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    ApiError e = error_of(401, h.empty() && !has_x ? "missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'"
                                                   : "incorrect API key provided",
                          "invalid_request_error");
    e.code = "invalid_api_key";
    reply_error(res, e, anthropic_route(req.path));
    return httplib::Server::HandlerResponse::Handled;
  });
  http_->set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                      httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e = error_of(res.status, strf("HTTP %d for %s %s", res.status, req.method.c_str(), req.path.c_str()),
                          res.status >= 500 ? "server_error" : "invalid_request_error");
    if (res.status == 404) {
      e.message = "no route for " + req.method + " " + req.path;
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = strf("the request body is too large (over %zu MiB)", kMaxBodyBytes >> 20);
    } else if (res.status == 414) {
      e.message = "the request line is too long (over 8 KiB)";
    } else if (res.status == 400) {
      e.message = "malformed HTTP request (or a header line over 8 KiB)";
    }
    set_json(res, anthropic_route(req.path) ? anthropic_error_body(e) : e.body());
    std::lock_guard lk(stats_m_);
    ++errors_[res.status];
    return httplib::Server::HandlerResponse::Handled;
  }));

  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    count("health");
    if (draining_) res.status = 503;  // load balancers stop sending here
    set_json(res, json{{"status", draining_ ? "shutting down" : "ok"}});
  });
  http_->Get("/", [this](const httplib::Request&, httplib::Response& res) {
    count("web");
    res.set_content(web_page_html(), "text/html; charset=utf-8");
  });
  auto models = [this](const httplib::Request&, httplib::Response& res) {
    count("models");
    // The id first (the web page shows data[0]), then each --alias: every name the 'model' field accepts.
    json data = json::array();
    for (const std::string& name : model_names(model_))
      data.push_back({{"id", name},
                      {"object", "model"},
                      {"created", model_.created},
                      {"owned_by", "tern"},
                      {"meta", {{"n_ctx", model_.n_ctx}, {"n_ctx_train", model_.n_ctx_train}, {"n_vocab", model_.n_vocab}}}});
    set_json(res, json{{"object", "list"}, {"data", data}});
  };
  http_->Get("/v1/models", models);
  http_->Get("/models", models);
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    count("metrics");
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  post("/v1/chat/completions", [this](const std::string& body, httplib::Response& res) {
    count("chat_completions");
    generate(body, res, true);
  });
  post("/v1/completions", [this](const std::string& body, httplib::Response& res) {
    count("completions");
    generate(body, res, false);
  });
  post("/v1/messages", [this](const std::string& body, httplib::Response& res) {
    count("messages");
    messages(body, res);
  });
  post("/v1/messages/count_tokens", [this](const std::string& body, httplib::Response& res) {
    count("messages_count_tokens");
    ApiContext ctx{tok_, tpl_, model_, "auto", nullptr, tool_format_};
    const ParsedRequest p = parse_chat_request(messages_to_chat(parse_json_body(body), /*count_only=*/true), ctx);
    set_json(res, json{{"input_tokens", p.gen.prompt.size()}});
  });
  post("/tokenize", [this](const std::string& body, httplib::Response& res) {
    count("tokenize");
    json b = parse_json_body(body);
    if (!b.contains("content") || !b["content"].is_string())
      api_fail(400, "content", "invalid_value", "'content' must be a string");
    for (const char* k : {"add_special", "with_pieces"})
      if (b.contains(k) && !b[k].is_boolean()) api_fail(400, k, "invalid_value", std::string("'") + k + "' must be true or false");
    std::vector<int32_t> ids;
    try {
      ids = tok_.encode(b["content"].get<std::string>(), /*parse_special=*/true);
    } catch (const Error& e) {
      api_fail(400, "content", "invalid_value", e.what());
    }
    if (b.value("add_special", false) && tok_.add_bos() && tok_.bos_id() >= 0) ids.insert(ids.begin(), tok_.bos_id());
    json out = json::array();
    for (int32_t id : ids) {
      if (b.value("with_pieces", false)) out.push_back({{"id", id}, {"piece", tok_.token_bytes(id)}});
      else out.push_back(id);
    }
    set_json(res, json{{"tokens", out}});
  });
  post("/detokenize", [this](const std::string& body, httplib::Response& res) {
    count("detokenize");
    json b = parse_json_body(body);
    if (!b.contains("tokens") || !b["tokens"].is_array())
      api_fail(400, "tokens", "invalid_value", "'tokens' must be an array of token ids");
    std::vector<int32_t> ids;
    for (const json& t : b["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok_.n_vocab())
        api_fail(400, "tokens", "invalid_value",
                 "token ids must be integers in [0, " + std::to_string(tok_.n_vocab()) + "), got " + t.dump());
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    // Invalid UTF-8 (a token list that ends inside a character) is replaced, so the JSON stays valid.
    text::StreamDecoder dec(tok_);
    std::string s;
    for (int32_t id : ids) s += dec.push(id);
    s += dec.flush();
    set_json(res, json{{"content", s}});
  });
}

void Server::generate(const std::string& request_body, httplib::Response& res, bool chat) {
  const json body = parse_json_body(request_body);
  ApiContext ctx{tok_, tpl_, model_, o_.reasoning_format, &turns_, tool_format_};
  ParsedRequest p = chat ? parse_chat_request(body, ctx) : parse_completion_request(body, ctx);
  std::shared_ptr<Completion> c = submit(std::move(p.gen), chat ? "messages" : "prompt");
  auto guard = std::make_shared<InFlight>(in_flight_);
  const std::string id = random_id(chat ? "chatcmpl-" : "cmpl-");
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const std::string model = p.model;  // the name the request used (the id or an alias), else the id
  const bool include_usage = p.include_usage, want_logprobs = p.gen.top_logprobs >= 0;
  const text::Tokenizer* tokp = &tok_;
  const Reasoning reasoning = p.reasoning;
  const ToolCallFormat tool_format = p.tool_format;
  const json tools = p.tools;
  const std::string forced = p.forced_text;
  auto delta_json = [](const ChatDelta& d) {
    json j = json::object();
    if (!d.reasoning.empty()) j["reasoning_content"] = d.reasoning;
    if (!d.content.empty()) j["content"] = d.content;
    return j;
  };
  // The provider runs on this HTTP thread until the request ends; a failed write means the client left.
  auto lost = [this, c] { return client_left(*c); };
  if (p.stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, guard = guard](size_t, httplib::DataSink& sink) {
          auto send = [&](const json& j) {
            const std::string s = "data: " + to_text(j) + "\n\n";
            return sink.write(s.data(), s.size());
          };
          if (chat && !send(chat_chunk(id, created, model, {{"role", "assistant"}, {"content", ""}}, Finish::kNone)))
            return lost();
          auto last = clock::now();
          size_t text_offset = 0;
          ChatOutputSplitter split(reasoning, tools, tool_format);
          if (chat && !forced.empty()) {
            const ChatDelta cd = push_forced(split, forced);
            if (!cd.empty() && !send(chat_chunk(id, created, model, delta_json(cd), Finish::kNone))) return lost();
          }
          for (;;) {
            std::string text;
            std::vector<TokenLogprob> lps;
            const bool done = c->wait(&text, 100ms, &lps);
            if (!text.empty() || !lps.empty()) {
              json lp = !want_logprobs ? json(nullptr)
                        : chat         ? chat_logprobs(lps, *tokp)
                                       : completion_logprobs(lps, *tokp, text_offset);
              text_offset += text.size();
              const ChatDelta cd = chat ? split.push(text) : ChatDelta{};
              if (!chat || !cd.empty() || want_logprobs) {
                json d = chat ? chat_chunk(id, created, model, delta_json(cd), Finish::kNone, lp)
                              : completion_chunk(id, created, model, text, Finish::kNone, lp);
                if (!send(d)) return lost();
                last = clock::now();
              }
            } else if (clock::now() - last > 1s) {
              // An SSE comment: keeps proxies awake and finds clients that left while the request waits.
              if (!sink.write(": ping\n\n", 8)) return lost();
              last = clock::now();
            }
            if (done) break;
          }
          const Finish f = c->finish();
          bool ok = true;
          std::vector<ToolCall> calls;
          if (chat) {
            const ChatDelta cd = split.finish(&calls);
            if (!cd.empty()) ok = send(chat_chunk(id, created, model, delta_json(cd), Finish::kNone));
            if (ok && !calls.empty())
              ok = send(chat_chunk(id, created, model, {{"tool_calls", tool_calls_json(calls, true)}}, Finish::kNone));
          }
          if (!ok) return lost();
          if (f == Finish::kError) {
            ok = send(error_of(500, c->error(), "server_error").body());
          } else {
            json last_chunk = chat ? chat_chunk(id, created, model, json::object(), f) : completion_chunk(id, created, model, "", f);
            if (!calls.empty() && f == Finish::kStop) last_chunk["choices"][0]["finish_reason"] = "tool_calls";
            ok = send(last_chunk);
          }
          if (ok && include_usage)
            ok = send(usage_chunk(chat ? "chat.completion.chunk" : "text_completion", id, created, model,
                                  usage_json(c->n_prompt(), c->n_completion(), c->n_cached())));
          if (ok) ok = sink.write("data: [DONE]\n\n", 14);
          if (!ok) return lost();
          sink.done();
          return true;
        },
        [c](bool success) {
          if (!success) c->cancel();
        });
    return;
  }
  // Not streaming: the body is sent when the request ends.
  res.set_chunked_content_provider(
      "application/json",
      [=, guard = guard](size_t, httplib::DataSink& sink) {
        std::string text;
        std::vector<TokenLogprob> lps;
        if (!wait_whole(*c, sink, &text, &lps)) return lost();
        const Finish f = c->finish();
        const json usage = usage_json(c->n_prompt(), c->n_completion(), c->n_cached());
        json lp = !want_logprobs ? json(nullptr) : chat ? chat_logprobs(lps, *tokp) : completion_logprobs(lps, *tokp, 0);
        json out;
        if (f == Finish::kError) {
          out = error_of(500, c->error(), "server_error").body();
        } else if (chat) {
          ChatOutputSplitter split(reasoning, tools, tool_format);
          std::vector<ToolCall> calls;
          ChatDelta d = split_answer(split, forced, text, &calls);
          json message{{"role", "assistant"}, {"content", d.content}};
          if (!d.reasoning.empty()) message["reasoning_content"] = d.reasoning;
          if (!calls.empty()) {
            while (!d.content.empty() && (d.content.back() == '\n' || d.content.back() == ' ')) d.content.pop_back();
            message["content"] = d.content.empty() ? json(nullptr) : json(d.content);
            message["tool_calls"] = tool_calls_json(calls, false);
          }
          out = chat_response(id, created, model, message, f, usage, lp);
          if (!calls.empty() && f == Finish::kStop) out["choices"][0]["finish_reason"] = "tool_calls";
        } else {
          out = completion_response(id, created, model, text, f, usage, lp);
        }
        const std::string s = to_text(out);
        if (!sink.write(s.data(), s.size())) return lost();
        sink.done();
        return true;
      },
      [c](bool success) {
        if (!success) c->cancel();
      });
}

bool Server::client_left(Completion& c) {
  c.cancel();
  ++disconnects_;
  return false;
}

std::shared_ptr<Completion> Server::submit(GenRequest gen, const char* param) {
  if (draining_) {
    ApiError e = error_of(503, "the server is shutting down", "server_error");
    e.code = "server_shutting_down";
    throw e;
  }
  try {
    return sched_.submit(std::move(gen));
  } catch (const AdmissionError& e) {
    if (e.queue_full) {
      ApiError busy = error_of(503, e.what(), "server_overloaded");
      busy.retry_after = 1;
      throw busy;
    }
    api_fail(400, param, "context_length_exceeded", e.what());
  } catch (const Error& e) {
    api_fail(400, "", "invalid_value", e.what());
  }
}

void Server::messages(const std::string& request_body, httplib::Response& res) {
  ApiContext ctx{tok_, tpl_, model_, "auto", &turns_, tool_format_};
  ParsedRequest p = parse_chat_request(messages_to_chat(parse_json_body(request_body)), ctx);
  const int64_t n_prompt = static_cast<int64_t>(p.gen.prompt.size());
  std::shared_ptr<Completion> c = submit(std::move(p.gen), "messages");
  auto guard = std::make_shared<InFlight>(in_flight_);
  const std::string id = random_id("msg_");
  const std::string model = p.model;
  const Reasoning reasoning = p.reasoning;
  const ToolCallFormat tool_format = p.tool_format;
  const json tools = p.tools;
  const std::string forced = p.forced_text;
  auto lost = [this, c] { return client_left(*c); };
  // stop_reason, stop_sequence (set only when that is the reason) and usage.
  auto outcome = [c](bool tool_calls) {
    const std::string reason = anthropic_stop_reason(c->finish(), tool_calls, c->stop_string());
    return std::make_tuple(reason, reason == "stop_sequence" ? c->stop_string() : std::string(),
                           anthropic_usage(c->n_prompt(), c->n_completion(), c->n_cached()));
  };
  if (p.stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, guard = guard](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
          MessageEvents ev(id, model);
          if (!send(ev.start(n_prompt))) return lost();
          ChatOutputSplitter split(reasoning, tools, tool_format);  // the answer's parts, as chat completions split them
          if (!send(ev.push(push_forced(split, forced)))) return lost();
          auto last = clock::now();
          for (;;) {
            std::string text;
            const bool done = c->wait(&text, 100ms);
            if (!text.empty()) {
              if (!send(ev.push(split.push(text)))) return lost();
              last = clock::now();
            } else if (clock::now() - last > 1s) {
              if (!send(MessageEvents::ping())) return lost();
              last = clock::now();
            }
            if (done) break;
          }
          if (c->finish() == Finish::kError) {
            if (!send(MessageEvents::error(error_of(500, c->error(), "server_error")))) return lost();
            sink.done();
            return true;
          }
          std::vector<ToolCall> calls;
          if (!send(ev.push(split.finish(&calls)))) return lost();
          if (!send(ev.tool_uses(calls))) return lost();
          const auto [stop_reason, stop_sequence, usage] = outcome(!calls.empty());
          if (!send(ev.finish(stop_reason, stop_sequence, usage))) return lost();
          sink.done();
          return true;
        },
        [c](bool success) {
          if (!success) c->cancel();
        });
    return;
  }
  res.set_chunked_content_provider(
      "application/json",
      [=, guard = guard](size_t, httplib::DataSink& sink) {
        std::string text;
        if (!wait_whole(*c, sink, &text, nullptr)) return lost();
        json out;
        if (c->finish() == Finish::kError) {
          out = anthropic_error_body(error_of(500, c->error(), "server_error"));
        } else {
          ChatOutputSplitter split(reasoning, tools, tool_format);
          std::vector<ToolCall> calls;
          const ChatDelta d = split_answer(split, forced, text, &calls);
          const auto [stop_reason, stop_sequence, usage] = outcome(!calls.empty());
          out = anthropic_message(id, model, anthropic_content(d, calls), stop_reason, stop_sequence, usage);
        }
        const std::string s = to_text(out);
        if (!sink.write(s.data(), s.size())) return lost();
        sink.done();
        return true;
      },
      [c](bool success) {
        if (!success) c->cancel();
      });
}

std::string Server::metrics_text() {
  const SchedulerStats s = sched_.stats();
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    out += strf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  };
  {
    std::lock_guard lk(stats_m_);
    metric("tern_http_requests_total", "counter", "HTTP requests received, by endpoint.");
    for (const auto& [ep, n] : requests_) out += strf("tern_http_requests_total{endpoint=\"%s\"} %lld\n", ep.c_str(), static_cast<long long>(n));
    metric("tern_http_errors_total", "counter", "HTTP error responses, by status.");
    for (const auto& [st, n] : errors_) out += strf("tern_http_errors_total{status=\"%d\"} %lld\n", st, static_cast<long long>(n));
  }
  auto line = [&](const char* name, const char* type, const char* help, double v) {
    metric(name, type, help);
    out += strf("%s %.17g\n", name, v);
  };
  line("tern_requests_finished_total", "counter", "Generation requests that ran to the end.", static_cast<double>(s.requests_done));
  line("tern_requests_cancelled_total", "counter", "Generation requests cancelled (client left or stop).", static_cast<double>(s.requests_cancelled));
  line("tern_client_disconnects_total", "counter", "Clients that left before their answer was complete.", static_cast<double>(disconnects_.load()));
  line("tern_prompt_tokens_total", "counter", "Prompt tokens processed.", static_cast<double>(s.prompt_tokens));
  line("tern_completion_tokens_total", "counter", "Tokens generated.", static_cast<double>(s.completion_tokens));
  line("tern_forward_steps_total", "counter", "Batched forward steps run.", static_cast<double>(s.steps));
  line("tern_forward_seconds_total", "counter", "Seconds spent in forward steps.", s.busy_seconds);
  line("tern_tokens_per_second", "gauge", "(Prompt + generated) tokens per forward second since start.",
       s.busy_seconds > 0 ? static_cast<double>(s.prompt_tokens + s.completion_tokens) / s.busy_seconds : 0.0);
  line("tern_draft_steps_total", "counter", "Decode steps of sampling sequences (speculative decoding).", static_cast<double>(s.draft.steps));
  line("tern_draft_tokens_total", "counter", "Tokens drafted by the MTP block and offered to verification.", static_cast<double>(s.draft.drafted));
  line("tern_draft_accepted_total", "counter", "Drafted tokens the model's own sampling took.", static_cast<double>(s.draft.accepted));
  line("tern_draft_acceptance", "gauge", "Accepted / drafted tokens since start.", s.draft.acceptance());
  line("tern_tokens_per_step", "gauge", "Tokens taken per decode step of a sequence since start (1 without drafting).", s.draft.tokens_per_step());
  line("tern_prefix_cache_hits_total", "counter", "Requests that resumed from a cached prefix.", static_cast<double>(s.cache.hits));
  line("tern_prefix_cache_misses_total", "counter", "Requests that found no cached prefix.", static_cast<double>(s.cache.misses));
  line("tern_prefix_cache_tokens_reused_total", "counter", "Prompt tokens not processed thanks to the cache.", static_cast<double>(s.cache.tokens_reused));
  line("tern_prefix_cache_evictions_total", "counter", "Snapshots evicted to stay within the budget.", static_cast<double>(s.cache.evictions));
  line("tern_prefix_cache_entries", "gauge", "Snapshots held.", static_cast<double>(s.cache.entries));
  line("tern_prefix_cache_bytes", "gauge", "Bytes held by snapshots.", static_cast<double>(s.cache.bytes));
  line("tern_prefix_cache_budget_bytes", "gauge", "Prefix-cache budget (--cache-mib).", static_cast<double>(s.cache.budget));
  line("tern_expert_cache_slots", "gauge", "Routed experts cached per layer (0: experts memory-mapped, no --mem-budget).",
       static_cast<double>(s.expert_slots));
  line("tern_expert_cache_hits_total", "counter", "Routed-expert lookups served from the cache.", static_cast<double>(s.experts.hits));
  line("tern_expert_cache_misses_total", "counter", "Routed experts read from the model file.", static_cast<double>(s.experts.misses));
  line("tern_expert_cache_read_bytes_total", "counter", "Bytes of routed experts read from the model file.", static_cast<double>(s.experts.bytes_read));
  line("tern_expert_cache_wait_seconds_total", "counter", "Seconds forwards waited on expert reads.", s.experts.read_seconds);
  line("tern_queue_depth", "gauge", "Requests waiting for a free sequence.", static_cast<double>(s.queued));
  line("tern_sequences_active", "gauge", "Sequences running now.", static_cast<double>(s.active));
  line("tern_sequences_max", "gauge", "Sequences that can run at once (--parallel).", static_cast<double>(sched_.parallel()));
  line("tern_kv_tokens", "gauge", "KV rows the sequences share (--parallel auto when fewer fit whole; 0: none).",
       static_cast<double>(s.kv_tokens));
  line("tern_kv_reserved_tokens", "gauge", "KV rows reserved by running requests.", static_cast<double>(s.kv_reserved));
  line("tern_kv_waits_total", "counter", "Requests that waited for KV rows (not for a free sequence).",
       static_cast<double>(s.kv_waits));
  return out;
}

}  // namespace tern::serve
