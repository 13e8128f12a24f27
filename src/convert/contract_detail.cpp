// Shared helpers of the tensor tables (contract_detail.h).
#include "convert/contract_detail.h"

#include "core/error.h"

namespace tern::convert::detail {

namespace {

bool parse_index(const std::string& s, size_t& i, int64_t& out) {
  const size_t st = i;
  int64_t v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i - st < 9) v = v * 10 + (s[i++] - '0');
  if (i == st || (s[st] == '0' && i - st > 1)) return false;
  out = v;
  return true;
}

}  // namespace

bool match(const char* pat, const std::string& name, int64_t& L, int64_t& E) {
  size_t i = 0;
  for (const char* p = pat; *p;) {
    if (p[0] == '{' && (p[1] == 'L' || p[1] == 'E') && p[2] == '}') {
      if (!parse_index(name, i, p[1] == 'L' ? L : E)) return false;
      p += 3;
    } else {
      if (i >= name.size() || name[i] != *p) return false;
      ++i, ++p;
    }
  }
  return i == name.size();
}

std::string fill(const char* pat, int64_t L) {
  std::string s = pat;
  for (const char* ph : {"{L}", "{N}"})
    if (size_t at = s.find(ph); at != std::string::npos) s.replace(at, 3, std::to_string(L));
  return s;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

std::string src_label(const Checkpoint& ck, const SourceTensor& s) {
  return ck.files[s.file]->name() + ": tensor '" + s.name + "'";
}

std::vector<OutTensor> gather_expert(std::map<int64_t, ExpertGroup>& groups, const Checkpoint& ck, const HParams& hp,
                                     const OutTensor& t, int64_t expert, const SourceTensor* s) {
  if (expert >= hp.n_expert)
    fail("%s: expert index %lld >= the expert count %lld", src_label(ck, *s).c_str(), static_cast<long long>(expert),
         static_cast<long long>(hp.n_expert));
  ExpertGroup& g = groups[t.layer];
  auto& v = g.by_proj[t.name];
  v.resize(static_cast<size_t>(hp.n_expert), nullptr);
  v[static_cast<size_t>(expert)] = s;
  if (++g.count < static_cast<size_t>(hp.n_expert) * 3) return {};
  std::vector<OutTensor> out;
  for (const char* proj : {"ffn_down_exps", "ffn_gate_exps", "ffn_up_exps"}) {
    const std::string gname = "blk." + std::to_string(t.layer) + "." + proj + ".weight";
    auto it = g.by_proj.find(gname);
    if (it == g.by_proj.end())
      fail("%s: layer %lld: per-expert %s keys missing", ck.dir.c_str(), static_cast<long long>(t.layer), proj);
    OutTensor st;
    st.name = gname;
    st.layer = t.layer;
    st.combine = Combine::kStackExperts;
    st.srcs = it->second;
    for (const SourceTensor* e : st.srcs)
      if (!e) fail("%s: layer %lld: %s has a missing expert", ck.dir.c_str(), static_cast<long long>(t.layer), proj);
    st.shape = {hp.n_expert, st.srcs[0]->info->shape[0], st.srcs[0]->info->shape[1]};
    out.push_back(std::move(st));
  }
  groups.erase(t.layer);
  return out;
}

void check_experts_complete(const std::map<int64_t, ExpertGroup>& groups, const Checkpoint& ck, const HParams& hp) {
  for (const auto& [layer, g] : groups)
    fail("%s: layer %lld: %zu of %lld per-expert tensors present", ck.dir.c_str(), static_cast<long long>(layer),
         g.count, static_cast<long long>(hp.n_expert * 3));
}

void fail_missing(const Checkpoint& ck, const std::vector<std::string>& missing) {
  if (missing.empty()) return;
  std::string list;
  for (size_t i = 0; i < missing.size() && i < 20; ++i) list += "\n  " + missing[i];
  fail("%s: %zu GGUF tensor(s) have no source in the checkpoint:%s", ck.dir.c_str(), missing.size(), list.c_str());
}

}  // namespace tern::convert::detail

namespace tern::convert::detail {

std::vector<std::pair<const SourceTensor*, Classified>> classify_all(const Checkpoint& ck, bool keep_mtp, Plan& plan) {
  const HParams& hp = ck.hp;
  std::vector<std::string> unknown;
  std::vector<std::pair<const SourceTensor*, Classified>> conv;
  for (const SourceTensor& s : ck.tensors) {
    Classified c = classify(s.name, hp, keep_mtp);
    switch (c.cls) {
      case TensorClass::kSkipMtp: ++plan.n_skipped_mtp; break;
      case TensorClass::kSkipVisual: ++plan.n_skipped_visual; break;
      case TensorClass::kUnknown: unknown.push_back(s.name + (c.why.empty() ? "" : " (" + c.why + ")")); break;
      case TensorClass::kConvert: conv.emplace_back(&s, std::move(c)); break;
    }
  }
  if (!unknown.empty()) {
    std::string list;
    for (const std::string& u : unknown) list += "\n  " + u;
    fail("%s: %zu tensor name(s) not in the %s contract:%s", ck.dir.c_str(), unknown.size(), hp.arch.c_str(),
         list.c_str());
  }
  // Dtype and shape of every converted source, before any data is read.
  for (auto& [s, c] : conv) {
    const auto dt = s->info->dtype;
    if (dt != safetensors::DType::F32 && dt != safetensors::DType::F16 && dt != safetensors::DType::BF16)
      fail("%s: dtype %s is not supported (supported: F32, F16, BF16)", src_label(ck, *s).c_str(),
           safetensors::dtype_name(dt));
    const std::vector<int64_t> want = expected_shape(*c.rule, hp);
    if (s->info->shape != want)
      fail("%s: shape %s, expected %s from config.json", src_label(ck, *s).c_str(), s->info->shape_str().c_str(),
           shape_str(want).c_str());
    if (c.layer >= hp.n_layer) ++plan.n_mtp_sources;
  }
  plan.n_sources_converted = conv.size();
  return conv;
}

}  // namespace tern::convert::detail
