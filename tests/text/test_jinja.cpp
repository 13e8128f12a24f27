#include <gtest/gtest.h>
#include "text/chat_template.h"
TEST(Jinja, Smoke) { EXPECT_EQ(tern::text::jinja::Template("a{{ 1 + 2 }}").render(nlohmann::ordered_json::object()), "a3"); }
