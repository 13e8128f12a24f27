// The HTTP server (cpp-httplib): OpenAI routes (/v1/chat/completions, /v1/completions, /v1/models), Anthropic's
// (/v1/messages, /v1/messages/count_tokens), /health, /metrics (Prometheus text), /tokenize, /detokenize and the web
// chat page at /. Generation goes through the Scheduler; a client that disconnects cancels its request. Errors use
// OpenAI's error body, Anthropic's on its routes. The API key is taken as `Authorization: Bearer KEY` or
// `x-api-key: KEY` (Anthropic's header).
// Security defaults (docs/SERVE.md "Security"): loopback unless told otherwise, an optional API key compared in
// constant time, body and header size limits; no route reads a file.
#pragma once
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "serve/api.h"
#include "serve/scheduler.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tern::serve {

// Request limits. A body over kMaxBodyBytes is a 413; a request line over 8 KiB a 414 and a header line over 8 KiB a
// 400 (cpp-httplib's compiled limits); more than kMaxHeaderCount headers or kMaxHeaderBytes of them in all a 400.
// A prompt is limited by the context (400 context_length_exceeded).
inline constexpr size_t kMaxBodyBytes = size_t{32} << 20;
inline constexpr size_t kMaxHeaderBytes = size_t{64} << 10;
inline constexpr size_t kMaxHeaderCount = 100;

// True when `given` equals `secret`. Constant time: the time depends on secret's length only, never on where the
// first difference is or on given's length.
bool same_secret(std::string_view given, std::string_view secret);
// 127.0.0.0/8, ::1 and "localhost": addresses other machines cannot reach.
bool is_loopback_host(const std::string& host);
// The warning `tern serve` logs once when it listens beyond loopback without an API key (empty: none is due).
std::string exposure_warning(const std::string& host, const std::string& api_key);

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback: other machines cannot connect unless told otherwise
  int port = 8080;
  std::string api_key;  // empty: no authentication
  std::string reasoning_format = "none";  // default for requests: "none" | "auto" (split out reasoning_content)
  int http_threads = 0; // 0: max(64, 8 x parallel) (each open client connection holds one)
};

class Server {
 public:
  Server(const ServerOptions& o, Scheduler& sched, const text::Tokenizer& tok, const text::ChatTemplate* tpl,
         ModelInfo model);
  ~Server();
  // Binds and serves until stop(). Throws Error when the address cannot be bound.
  void run();
  void stop();
  // Graceful shutdown (SIGTERM): from now on generation requests get 503 and /health says "shutting down"; waits
  // until the running requests have been answered or `grace` has passed (then cancels what is left), and stops.
  // force() (a second signal) ends the wait at once.
  void drain(std::chrono::milliseconds grace);
  void force() { forced_ = true; }
  int in_flight() const { return in_flight_.load(); }  // generation requests not yet fully answered
  int port() const { return port_.load(); }  // the bound port once run() has bound (0 before)

 private:
  void routes();
  void generate(const std::string& body, httplib::Response& res, bool chat);
  void messages(const std::string& body, httplib::Response& res);  // Anthropic /v1/messages
  std::shared_ptr<Completion> submit(GenRequest gen, const char* param);  // admission errors -> ApiError
  bool client_left(Completion& c);  // a write to the client failed: cancels its request, counts it; false
  std::string metrics_text();
  void count(const std::string& endpoint);

  ServerOptions o_;
  Scheduler& sched_;
  const text::Tokenizer& tok_;
  const text::ChatTemplate* tpl_;
  ToolCallFormat tool_format_ = ToolCallFormat::kQwen;  // chosen from the chat template, logged once
  text::TurnCache turns_;  // the chat prompts of recent requests (ApiContext::turns)
  ModelInfo model_;
  std::unique_ptr<httplib::Server> http_;

  std::mutex stats_m_;
  std::map<std::string, int64_t> requests_;  // endpoint -> count
  std::map<int, int64_t> errors_;            // HTTP status -> count
  std::atomic<int64_t> disconnects_{0};
  std::atomic<bool> draining_{false}, forced_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<int> port_{0};
};

}  // namespace tern::serve
