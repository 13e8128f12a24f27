// Reading model references (tests/fixtures/models/<preset>/ref_*.json + f32 bins, written by tools/make_fixtures.py
// and tools/make_glm_fixtures.py) and comparing an engine's teacher-forced logits with them, for any architecture.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/sampler.h"

namespace tern::test {

namespace fs = std::filesystem;
using nlohmann::json;

// Teacher-forced logits for every token of a prompt, [n, n_vocab].
using TeacherForced = std::function<std::vector<float>(const std::vector<int32_t>&)>;

inline json read_json(const fs::path& p) {
  std::ifstream f(p);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  return json::parse(f);
}

inline std::vector<float> read_f32(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  f.seekg(0, std::ios::end);
  std::vector<float> v(static_cast<size_t>(f.tellg()) / 4);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

struct Prompt {
  std::string name;
  std::vector<int32_t> tokens;
  std::vector<int32_t> argmax;
  std::vector<float> logits;  // rows from first_row on
  int64_t first_row = 0, rows = 0;
};

inline std::vector<Prompt> read_prompts(const fs::path& ref) {
  json j = read_json(ref);
  std::vector<Prompt> out;
  for (const auto& p : j["prompts"]) {
    Prompt pr;
    pr.name = p["name"];
    pr.tokens = p["tokens"].get<std::vector<int32_t>>();
    pr.argmax = p["argmax"].get<std::vector<int32_t>>();
    pr.logits = read_f32(ref.parent_path() / p["logits"]["file"].get<std::string>());
    pr.first_row = p["logits"]["first_row"];
    pr.rows = p["logits"]["shape"][0];
    out.push_back(std::move(pr));
  }
  return out;
}

// Bounds relative to (1 + max|logit|) of the reference; percentages of rows / positions.
struct HfTolerance {
  double mean_row_err = 1e-3;  // mean over rows of the row's max |dlogit|
  int max_outlier_pct = 3;     // rows beyond 5e-3
  int min_agree_pct = 100;     // positions whose top-1 equals transformers'
};

// transformers fp32 (ref_hf.json), by default: top-1 identical at every position, every row within
// 5e-3 * (1 + max|logit|) except at most 3% of rows (near-ties in expert routing), mean row error within
// 1e-3 * (1 + max|logit|).
inline void expect_logits_match_transformers(const TeacherForced& teacher_forced, int64_t V, const fs::path& ref,
                                             const HfTolerance& tol = {}) {
  for (const Prompt& p : read_prompts(ref)) {
    std::vector<float> lg = teacher_forced(p.tokens);
    ASSERT_EQ(static_cast<int64_t>(lg.size()), static_cast<int64_t>(p.tokens.size()) * V);
    double max_ref = 0, sum_err = 0;
    std::vector<double> row_err(p.rows, 0.0);
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t v = 0; v < V; ++v) {
        const double want = p.logits[r * V + v], got = lg[(p.first_row + r) * V + v];
        row_err[r] = std::max(row_err[r], std::fabs(want - got));
        max_ref = std::max(max_ref, std::fabs(want));
      }
    int64_t outliers = 0;
    for (double e : row_err) {
      outliers += e > 5e-3 * (1 + max_ref);
      sum_err += e;
    }
    EXPECT_LE(outliers, p.rows * tol.max_outlier_pct / 100) << p.name << ": rows beyond 5e-3 relative";
    EXPECT_LE(sum_err / p.rows, tol.mean_row_err * (1 + max_ref)) << p.name << ": mean row max |dlogit|";
    int agree = 0;
    for (size_t t = 0; t < p.tokens.size(); ++t) agree += runtime::argmax(lg.data() + t * V, V) == p.argmax[t];
    EXPECT_GE(agree, static_cast<int>(p.tokens.size() * tol.min_agree_pct / 100))
        << p.name << ": top-1 agreement with transformers";
  }
}

// llama.cpp on the same file (ref_llamacpp_<type>.json): top-1 agreement >= 0.90 (every row for exact weights;
// quantized: rows where llama.cpp's top two are within 0.05 are left out), mean KL(llama.cpp || tern) <= 0.05.
inline void expect_logits_match_llamacpp(const TeacherForced& teacher_forced, int64_t V, const fs::path& ref,
                                  bool exact_weights, const std::string& label) {
  for (const Prompt& p : read_prompts(ref)) {
    std::vector<float> lg = teacher_forced(p.tokens);
    int agree = 0, ties = 0;
    double kl_sum = 0;
    for (int64_t r = 0; r < p.rows; ++r) {
      const float* a = p.logits.data() + r * V;
      const float* b = lg.data() + (p.first_row + r) * V;
      const int32_t ta = runtime::argmax(a, V);
      float second = -INFINITY;
      for (int64_t v = 0; v < V; ++v)
        if (v != ta) second = std::max(second, a[v]);
      if (ta == runtime::argmax(b, V)) ++agree;
      else if (!exact_weights && a[ta] - second < 0.05f) ++ties;
      double ma = -INFINITY, mb = -INFINITY, za = 0, zb = 0, kl = 0;
      for (int64_t v = 0; v < V; ++v) ma = std::max(ma, double(a[v])), mb = std::max(mb, double(b[v]));
      for (int64_t v = 0; v < V; ++v) za += std::exp(a[v] - ma), zb += std::exp(b[v] - mb);
      for (int64_t v = 0; v < V; ++v) {
        double pa = std::exp(a[v] - ma) / za, lpa = a[v] - ma - std::log(za), lpb = b[v] - mb - std::log(zb);
        kl += pa * (lpa - lpb);
      }
      kl_sum += kl;
    }
    const double frac = double(agree) / static_cast<double>(p.rows - ties), kl = kl_sum / p.rows;
    std::printf("[llama.cpp %s %s] top-1 agreement %.3f (%d near ties left out), mean KL %.2e\n", label.c_str(),
                p.name.c_str(), frac, ties, kl);
    if (exact_weights) {
      EXPECT_EQ(agree, p.rows) << p.name;
    }
    EXPECT_GE(frac, 0.90) << p.name;
    EXPECT_LE(kl, 0.05) << p.name;
  }
}

}  // namespace tern::test
