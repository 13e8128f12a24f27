// The web chat page served at `/`: one static HTML document (inline CSS and JS, no build step, no external
// resources) that talks to /v1/chat/completions with streaming. Non-goals: accounts, stored conversations.
#pragma once
#include <string>

namespace tern::serve {

const std::string& web_page_html();

}  // namespace tern::serve
