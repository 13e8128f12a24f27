// The HTTP server (cpp-httplib): OpenAI routes (/v1/chat/completions, /v1/completions, /v1/models), /health,
// /metrics (Prometheus text), /tokenize, /detokenize and the web chat page at /. Generation goes through the
// Scheduler; a client that disconnects cancels its request. Errors use OpenAI's error body.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "serve/api.h"
#include "serve/scheduler.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tern::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
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

 private:
  void routes();
  void generate(const std::string& body, httplib::Response& res, bool chat);
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
};

}  // namespace tern::serve
