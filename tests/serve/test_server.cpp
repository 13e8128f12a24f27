// The HTTP server's security defaults and model names, against a live in-process Server on loopback (bundled
// tern-tiny model, cpp-httplib's client): loopback by default, the warning for an exposed address without a key,
// 401 without / with a wrong key (OpenAI's error body), the constant-time compare, 413 / 400 size limits, the
// prompt limit, aliases, --any-model and the 404 for an unknown name.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "runtime/engine.h"
#include "serve/api.h"
#include "serve/scheduler.h"
#include "serve/server.h"
#include "text/gguf_vocab.h"

using namespace tern;
using namespace tern::serve;

namespace {

const char* kModel = TERN_FIXTURES_DIR "/../../models/tern-tiny-q35moe.gguf";

struct Fixture {
  std::unique_ptr<runtime::Engine> engine;
  std::unique_ptr<text::Tokenizer> tok;
  std::unique_ptr<Scheduler> sched;
};

Fixture& model() {
  static Fixture f = [] {
    runtime::EngineOptions o;
    o.model_path = kModel;
    o.n_ctx = 256;
    o.threads = 1;
    o.n_parallel = 1;
    Fixture x;
    x.engine = std::make_unique<runtime::Engine>(o);
    x.tok = std::make_unique<text::Tokenizer>(text::tokenizer_data_from_gguf(x.engine->model().file()));
    SchedulerOptions so;
    so.parallel = 1;
    so.batch = 64;
    x.sched = std::make_unique<Scheduler>(*x.engine, *x.tok, so);
    return x;
  }();
  return f;
}

// A Server on 127.0.0.1 and a free port, serving on its own thread until the test ends.
struct LiveServer {
  std::unique_ptr<Server> server;
  std::thread thread;
  std::unique_ptr<httplib::Client> client;

  explicit LiveServer(ServerOptions o, ModelInfo info = {}) {
    o.port = 0;
    Fixture& f = model();
    if (info.id.empty()) info.id = "tern-tiny-q35moe";
    info.n_ctx = f.sched->n_ctx();
    info.n_vocab = f.tok->n_vocab();
    server = std::make_unique<Server>(o, *f.sched, *f.tok, nullptr, info);
    thread = std::thread([this] { server->run(); });
    for (int i = 0; i < 5000 && server->port() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    client = std::make_unique<httplib::Client>("127.0.0.1", server->port());
    client->set_read_timeout(60, 0);
  }
  ~LiveServer() {
    server->stop();
    thread.join();
  }
};

json body_of(const httplib::Result& r) { return json::parse(r->body, nullptr, false); }

bool is_openai_error(const json& j, const std::string& code) {
  return j.is_object() && j.contains("error") && j["error"].contains("message") && j["error"].contains("type") &&
         j["error"].contains("param") && (code.empty() || j["error"]["code"] == code);
}

// A completion of one token that names `model` (a chat would need a template: the bundled model's is not loaded).
httplib::Result complete(LiveServer& s, const std::string& model, const httplib::Headers& h = {}) {
  json b{{"prompt", "In the beginning"}, {"max_tokens", 1}, {"temperature", 0}};
  if (!model.empty()) b["model"] = model;
  return s.client->Post("/v1/completions", h, b.dump(), "application/json");
}

}  // namespace

TEST(ServerSecurity, SameSecretIsEqualityOfBytes) {
  EXPECT_TRUE(same_secret("sk-local-123", "sk-local-123"));
  EXPECT_TRUE(same_secret("", ""));
  EXPECT_FALSE(same_secret("sk-local-124", "sk-local-123"));  // last byte differs
  EXPECT_FALSE(same_secret("tk-local-123", "sk-local-123"));  // first byte differs
  EXPECT_FALSE(same_secret("sk-local-12", "sk-local-123"));   // a prefix
  EXPECT_FALSE(same_secret("sk-local-1234", "sk-local-123")); // longer, the secret a prefix of it
  EXPECT_FALSE(same_secret("", "sk-local-123"));
  EXPECT_FALSE(same_secret("sk", ""));
  const std::string with_nul("sk\0x", 4);
  EXPECT_FALSE(same_secret(std::string("sk\0y", 4), with_nul));  // bytes after a NUL count
  EXPECT_TRUE(same_secret(std::string("sk\0x", 4), with_nul));
  EXPECT_FALSE(same_secret(std::string("sk", 2), with_nul));     // ... and a NUL is not an end
}

TEST(ServerSecurity, DefaultsToLoopback) {
  EXPECT_EQ(ServerOptions{}.host, "127.0.0.1");
  EXPECT_TRUE(is_loopback_host(ServerOptions{}.host));
  for (const char* h : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]", "::ffff:127.0.0.1"})
    EXPECT_TRUE(is_loopback_host(h)) << h;
  for (const char* h : {"0.0.0.0", "::", "192.168.1.5", "10.0.0.1", "example.com", "1127.0.0.1"})
    EXPECT_FALSE(is_loopback_host(h)) << h;
  // The CLI's default is ServerOptions' (declared once): `tern serve --help` shows it.
  FILE* p = popen(TERN_BINARY " serve --help 2>&1", "r");
  ASSERT_NE(p, nullptr);
  std::string help;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) help.append(buf, n);
  pclose(p);
  const size_t at = help.find("--host");
  ASSERT_NE(at, std::string::npos) << help;
  EXPECT_NE(help.find("127.0.0.1", at), std::string::npos) << help;
  EXPECT_NE(help.find("--any-model"), std::string::npos) << help;
  // A default server answers on 127.0.0.1.
  LiveServer s(ServerOptions{});
  auto r = s.client->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(ServerSecurity, WarnsOnceWhenExposedWithoutAKey) {
  EXPECT_EQ(exposure_warning("127.0.0.1", ""), "");
  EXPECT_EQ(exposure_warning("0.0.0.0", "sk-local"), "");
  const std::string w = exposure_warning("0.0.0.0", "");
  EXPECT_NE(w.find("without --api-key"), std::string::npos) << w;
  // The running server logs it once, at start, and not on loopback.
  for (const auto& [host, key, want] : {std::tuple{"0.0.0.0", "", 1}, std::tuple{"0.0.0.0", "k", 0}, std::tuple{"127.0.0.1", "", 0}}) {
    ServerOptions o;
    o.host = host;
    o.api_key = key;
    testing::internal::CaptureStderr();
    {
      LiveServer s(o);
      ASSERT_TRUE(s.client->Get("/health"));
      ASSERT_TRUE(s.client->Get("/health"));
    }
    const std::string log = testing::internal::GetCapturedStderr();
    int n = 0;
    for (size_t at = 0; (at = log.find("without --api-key", at)) != std::string::npos; ++at) ++n;
    EXPECT_EQ(n, want) << host << " key '" << key << "': " << log;
  }
}

TEST(ServerSecurity, ApiKeyRequiredOnApiRoutes) {
  ServerOptions o;
  o.api_key = "sk-test-key";
  LiveServer s(o);
  for (const char* path : {"/v1/models", "/metrics"}) {
    auto none = s.client->Get(path);
    ASSERT_TRUE(none);
    EXPECT_EQ(none->status, 401) << path;
    EXPECT_TRUE(is_openai_error(body_of(none), "invalid_api_key")) << none->body;
    EXPECT_NE(none->body.find("missing API key"), std::string::npos) << none->body;
    for (const char* bad : {"Bearer sk-test-kez", "Bearer sk-test-ke", "Bearer sk-test-key2", "Bearer ",
                            "sk-test-key", "Basic sk-test-key"}) {
      auto wrong = s.client->Get(path, {{"Authorization", bad}});
      ASSERT_TRUE(wrong);
      EXPECT_EQ(wrong->status, 401) << path << " " << bad;
      EXPECT_TRUE(is_openai_error(body_of(wrong), "invalid_api_key")) << wrong->body;
    }
    auto good = s.client->Get(path, {{"Authorization", "Bearer sk-test-key"}});
    ASSERT_TRUE(good);
    EXPECT_EQ(good->status, 200) << path << " " << good->body;
  }
  auto post = complete(s, "", {});
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 401);
  post = complete(s, "", {{"Authorization", "Bearer sk-test-key"}});
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 200) << post->body;
  // /health and the page stay open (they show nothing of the model's output).
  for (const char* path : {"/health", "/"}) {
    auto r = s.client->Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << path;
  }
}

TEST(ServerSecurity, SizeLimits) {
  LiveServer s(ServerOptions{});
  // A body over the limit: 413 in OpenAI's shape, and the server still serves.
  const std::string big(kMaxBodyBytes + 1, ' ');
  auto r = s.client->Post("/v1/completions", big, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_TRUE(is_openai_error(body_of(r), "")) << r->body;
  EXPECT_NE(r->body.find("too large"), std::string::npos) << r->body;
  // A header line over cpp-httplib's 8 KiB: 400.
  r = s.client->Get("/health", {{"X-Big", std::string(9000, 'a')}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_TRUE(is_openai_error(body_of(r), "")) << r->body;
  // Headers over kMaxHeaderBytes in all, or too many of them: 400 naming the limit.
  httplib::Headers many;
  for (size_t i = 0; i < kMaxHeaderCount + 1; ++i) many.emplace("X-H" + std::to_string(i), "1");
  r = s.client->Get("/health", many);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_TRUE(is_openai_error(body_of(r), "headers_too_large")) << r->body;
  httplib::Headers wide;
  for (int i = 0; i < 10; ++i) wide.emplace("X-W" + std::to_string(i), std::string(8000, 'w'));
  r = s.client->Get("/health", wide);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_TRUE(is_openai_error(body_of(r), "headers_too_large")) << r->body;
  // A prompt longer than the context: 400 context_length_exceeded, before anything runs.
  std::string words;
  for (int i = 0; i < 400; ++i) words += "light darkness ";
  r = s.client->Post("/v1/completions", json{{"prompt", words}, {"max_tokens", 4}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_TRUE(is_openai_error(body_of(r), "context_length_exceeded")) << r->body;
  r = s.client->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(ServerModelNames, IdAndAliasesAcceptedUnknownIs404) {
  ModelInfo info;
  info.id = "tern-tiny-q35moe";
  info.aliases = {"gpt-4o", "local"};
  LiveServer s(ServerOptions{}, info);
  auto models = s.client->Get("/v1/models");
  ASSERT_TRUE(models);
  std::vector<std::string> ids;
  const json list = body_of(models);
  for (const json& m : list["data"]) ids.push_back(m["id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"tern-tiny-q35moe", "gpt-4o", "local"}));
  for (const std::string name : {"", "tern-tiny-q35moe", "gpt-4o", "local"}) {
    auto r = complete(s, name);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << name << ": " << r->body;
    EXPECT_EQ(body_of(r)["model"], name.empty() ? "tern-tiny-q35moe" : name);  // answers carry the name used
  }
  auto r = complete(s, "gpt-3.5-turbo");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(is_openai_error(body_of(r), "model_not_found")) << r->body;
  EXPECT_EQ(body_of(r)["error"]["param"], "model");
}

TEST(ServerModelNames, AnyModelAcceptsEveryName) {
  ModelInfo info;
  info.id = "tern-tiny-q35moe";
  info.any_model = true;
  LiveServer s(ServerOptions{}, info);
  for (const std::string name : {"gpt-3.5-turbo", "claude", "tern-tiny-q35moe"}) {
    auto r = complete(s, name);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << name << ": " << r->body;
    EXPECT_EQ(body_of(r)["model"], "tern-tiny-q35moe");  // an unknown name is answered as the served id
  }
  auto models = s.client->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(body_of(models)["data"].size(), 1u);
}

TEST(ServerModelNames, AcceptsModelFunction) {
  ModelInfo m;
  m.id = "a";
  m.aliases = {"b", "a", "b"};
  EXPECT_EQ(model_names(m), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(accepts_model(m, "a"));
  EXPECT_TRUE(accepts_model(m, "b"));
  EXPECT_FALSE(accepts_model(m, "c"));
  EXPECT_FALSE(accepts_model(m, ""));
  m.any_model = true;
  EXPECT_TRUE(accepts_model(m, "c"));
}
