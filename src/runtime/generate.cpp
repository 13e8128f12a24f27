#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "runtime/stop.h"

namespace tern::runtime {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kLength: return "length";
    case StopReason::kEos: return "stop";
    case StopReason::kStopString: return "stop";
    case StopReason::kCancelled: return "cancelled";
    case StopReason::kContextFull: return "length";
  }
  return "?";
}

std::vector<int32_t> end_of_generation_ids(const text::Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (int32_t id : {tok.eos_id(), tok.eot_id()})
    if (id >= 0) ids.push_back(id);
  for (const char* s : {"<|im_end|>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>"})
    if (auto id = tok.find_token(s)) ids.push_back(*id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

GenerateResult generate(Engine& engine, models::SequenceState& seq, const text::Tokenizer& tok,
                        Sampler& sampler, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                        const std::function<bool(const std::string&)>& on_text) {
  using clock = std::chrono::steady_clock;
  GenerateResult res;
  if (prompt.empty()) fail("empty prompt: nothing to generate from");
  if (seq.n_past() + static_cast<int64_t>(prompt.size()) > seq.n_ctx())
    fail("prompt too long: %zu tokens (+%lld already in the sequence) exceed the context size %lld (raise -c)",
         prompt.size(), static_cast<long long>(seq.n_past()), static_cast<long long>(seq.n_ctx()));
  const std::vector<int32_t> eog = end_of_generation_ids(tok);
  const int64_t V = engine.info().n_vocab;
  for (int32_t t : prompt) sampler.accept(t);

  auto t0 = clock::now();
  const std::vector<float>* logits = &engine.eval(seq, prompt);
  auto t1 = clock::now();
  res.n_prompt = static_cast<int64_t>(prompt.size());
  res.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();

  text::StreamDecoder dec(tok, /*skip_special=*/false);
  std::string pending;  // decoded text not yet emitted (may be the start of a stop string)
  size_t emitted = 0;
  auto emit = [&](size_t upto) -> bool {
    if (upto <= emitted) return true;
    std::string piece = pending.substr(emitted, upto - emitted);
    emitted = upto;
    res.text += piece;
    return on_text ? on_text(piece) : true;
  };
  res.reason = StopReason::kLength;
  for (int i = 0; opts.n_predict < 0 || i < opts.n_predict; ++i) {
    const int32_t tok_id = sampler.sample(logits->data(), V);
    sampler.accept(tok_id);
    res.tokens.push_back(tok_id);
    if (!opts.ignore_eos && std::binary_search(eog.begin(), eog.end(), tok_id)) {
      res.reason = StopReason::kEos;
      break;
    }
    const size_t searched = pending.size();
    pending += dec.push(tok_id);
    StopMatch m = find_stop(pending, opts.stop, searched);
    if (m.stopped) {
      emit(m.emit_upto);
      res.reason = StopReason::kStopString;
      break;
    }
    if (!emit(m.emit_upto)) {
      res.reason = StopReason::kCancelled;
      break;
    }
    if (opts.n_predict >= 0 && i + 1 >= opts.n_predict) break;
    if (seq.n_past() >= seq.n_ctx()) {
      res.reason = StopReason::kContextFull;
      break;
    }
    logits = &engine.eval(seq, {tok_id});
  }
  if (res.reason == StopReason::kLength || res.reason == StopReason::kEos || res.reason == StopReason::kContextFull) {
    const size_t searched = pending.size();
    pending += dec.flush();
    StopMatch m = find_stop(pending, opts.stop, searched);
    emit(m.stopped ? m.emit_upto : pending.size());
  }
  res.gen_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace tern::runtime
