#include "serve/text_stream.h"

#include "runtime/stop.h"

namespace tern::serve {

TextStream::TextStream(const text::Tokenizer& tok, std::vector<std::string> stops)
    : dec_(tok, /*skip_special=*/false), stops_(std::move(stops)) {}

std::string TextStream::take(size_t upto) {
  if (upto <= emitted_) return {};
  std::string piece = text_.substr(emitted_, upto - emitted_);
  emitted_ = upto;
  return piece;
}

std::string TextStream::push(int32_t id, bool* stopped) {
  const size_t searched = text_.size();
  text_ += dec_.push(id);
  runtime::StopMatch m = runtime::find_stop(text_, stops_, searched);
  *stopped = m.stopped;
  if (m.stopped) matched_ = stops_[static_cast<size_t>(m.which)];
  return take(m.emit_upto);
}

std::string TextStream::finish() {
  const size_t searched = text_.size();
  text_ += dec_.flush();
  runtime::StopMatch m = runtime::find_stop(text_, stops_, searched);
  if (m.stopped) matched_ = stops_[static_cast<size_t>(m.which)];
  return take(m.stopped ? m.emit_upto : text_.size());
}

}  // namespace tern::serve
