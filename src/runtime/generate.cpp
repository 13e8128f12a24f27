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
  for (int32_t id : {tok.eos_id(), tok.eot_id(), tok.eom_id()})  // eom: GLM ends a tool-call turn with it
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
  for (int32_t t : prompt) sampler.accept(t);

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
  bool done = opts.n_predict == 0;
  DecodeLoop& loop = engine.decoder();
  DecodeSeq ds;
  ds.state = &seq;
  std::vector<DecodeSeq*> one = {&ds};
  // Each token the loop takes: sampled (the loop keeps a draft token when the draw equals it), then emitted.
  auto pick = [&](size_t, const LogitsRow& logits, int32_t) -> int32_t {
    const int32_t tok_id = sampler.sample(logits);
    sampler.accept(tok_id);
    res.tokens.push_back(tok_id);
    auto stop = [&](StopReason r) {
      res.reason = r;
      done = ds.stopped = true;
    };
    if (!opts.ignore_eos && std::binary_search(eog.begin(), eog.end(), tok_id)) {
      stop(StopReason::kEos);
      return tok_id;
    }
    const size_t searched = pending.size();
    pending += dec.push(tok_id);
    StopMatch m = find_stop(pending, opts.stop, searched);
    if (m.stopped) {
      emit(m.emit_upto);
      stop(StopReason::kStopString);
    } else if (!emit(m.emit_upto)) {
      stop(StopReason::kCancelled);
    } else if (opts.n_predict >= 0 && static_cast<int64_t>(res.tokens.size()) >= opts.n_predict) {
      stop(StopReason::kLength);
    }
    return tok_id;
  };

  const int64_t p0 = seq.n_past();
  auto t0 = clock::now();
  for (size_t fed = 0; fed < prompt.size();) {
    const size_t n = std::min(prompt.size() - fed, static_cast<size_t>(kMaxBatchRows));
    ds.feed.assign(prompt.begin() + fed, prompt.begin() + fed + n);
    fed += n;
    ds.sample = fed == prompt.size() && !done;
    loop.step(one, pick);
  }
  auto t1 = clock::now();
  res.n_prompt = static_cast<int64_t>(prompt.size());
  res.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
  while (!done) {
    if (seq.n_past() >= seq.n_ctx()) {
      res.reason = StopReason::kContextFull;
      break;
    }
    ds.feed = {res.tokens.back()};
    ds.sample = true;
    loop.step(one, pick);
  }
  if (res.reason == StopReason::kLength || res.reason == StopReason::kEos || res.reason == StopReason::kContextFull) {
    const size_t searched = pending.size();
    pending += dec.flush();
    StopMatch m = find_stop(pending, opts.stop, searched);
    emit(m.stopped ? m.emit_upto : pending.size());
  }
  // Without drafting the last sampled token is never fed; an accepted draft was (its verify forward kept the
  // checkpoint to step back to). A caller's next turn feeds that token itself, so it must not be in the state twice.
  const int64_t fed_all = p0 + static_cast<int64_t>(prompt.size() + res.tokens.size());
  if (!res.tokens.empty() && seq.n_past() == fed_all) seq.rollback(fed_all - 1);
  res.gen_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace tern::runtime
