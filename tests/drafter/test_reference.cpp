// The target and the drafter against the naive reference in
// naive_reference.hpp (loops, explicit visibility rules, float64).
#include <doctest/doctest.h>

#include "formats/safetensors.hpp"
#include "target/model_fixtures.hpp"
#include "target/naive_reference.hpp"

using namespace dflow::drafter;
namespace nv = dflow::target::naive;

namespace {

struct NaiveLayer {
  nv::Mat q, k, v, o, gate, up, down;
  nv::Vec input_norm, post_norm, q_norm, k_norm;
};

NaiveLayer naive_layer(const std::map<std::string, torch::Tensor>& w, const std::string& prefix) {
  return {nv::to_mat(w.at(prefix + "self_attn.q_proj.weight")),  nv::to_mat(w.at(prefix + "self_attn.k_proj.weight")),
          nv::to_mat(w.at(prefix + "self_attn.v_proj.weight")),  nv::to_mat(w.at(prefix + "self_attn.o_proj.weight")),
          nv::to_mat(w.at(prefix + "mlp.gate_proj.weight")),     nv::to_mat(w.at(prefix + "mlp.up_proj.weight")),
          nv::to_mat(w.at(prefix + "mlp.down_proj.weight")),     nv::to_vec(w.at(prefix + "input_layernorm.weight")),
          nv::to_vec(w.at(prefix + "post_attention_layernorm.weight")), nv::to_vec(w.at(prefix + "self_attn.q_norm.weight")),
          nv::to_vec(w.at(prefix + "self_attn.k_norm.weight"))};
}

struct Shape {
  int64_t heads, kv_heads, head_dim;
  double eps, theta;
};

// Head h of a projected, per-head-normed, rotated vector.
nv::Vec head_of(const nv::Vec& projected, int64_t head, const Shape& s, const nv::Vec& norm, double position) {
  const nv::Vec part = nv::slice(projected, static_cast<size_t>(head * s.head_dim), static_cast<size_t>(s.head_dim));
  return nv::rope(nv::rms_norm(part, norm, s.eps), position, s.theta);
}

nv::Vec value_head(const nv::Vec& projected, int64_t head, const Shape& s) {
  return nv::slice(projected, static_cast<size_t>(head * s.head_dim), static_cast<size_t>(s.head_dim));
}

}  // namespace

TEST_CASE("Model.Reference.TargetMatchesNaiveLoops") {
  torch::set_num_threads(1);
  const auto& dir = dflow::target::testing::tiny_target_dir();
  const dflow::target::TargetModel target = dflow::target::TargetModel::load(dir, torch::kCPU, torch::kFloat64);
  const dflow::target::HFConfig& c = target.config();
  const dflow::formats::TensorMap raw = dflow::formats::load_checkpoint_dir(dir);
  const Shape s{c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rms_norm_eps, c.rope_theta};
  const std::vector<int64_t> ids = {5, 300, 17, 17, 480, 2};
  const int64_t length = static_cast<int64_t>(ids.size());

  const nv::Mat embedding = nv::to_mat(raw.at("model.embed_tokens.weight"));
  std::vector<nv::Vec> h;
  for (const int64_t id : ids) h.push_back(nv::slice(embedding.data, static_cast<size_t>(id * c.hidden_size), c.hidden_size));
  const dflow::target::TargetOutput out =
      target.forward(torch::tensor(ids).unsqueeze(0), {0, 1, 2, 3}, /*want_logits=*/true);

  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const NaiveLayer w = naive_layer(raw, "model.layers." + std::to_string(layer) + ".");
    std::vector<nv::Vec> x, q, k, v;
    for (int64_t t = 0; t < length; ++t) {
      x.push_back(nv::rms_norm(h[t], w.input_norm, s.eps));
      q.push_back(nv::matvec(w.q, x[t]));
      k.push_back(nv::matvec(w.k, x[t]));
      v.push_back(nv::matvec(w.v, x[t]));
    }
    std::vector<nv::Vec> next;
    for (int64_t t = 0; t < length; ++t) {
      nv::Vec merged;
      for (int64_t head = 0; head < s.heads; ++head) {
        const int64_t kv_head = head / (s.heads / s.kv_heads);
        std::vector<nv::Vec> keys, values;
        for (int64_t past = 0; past <= t; ++past) {  // causal
          keys.push_back(head_of(k[past], kv_head, s, w.k_norm, static_cast<double>(past)));
          values.push_back(value_head(v[past], kv_head, s));
        }
        const nv::Vec attended = nv::attend(head_of(q[t], head, s, w.q_norm, static_cast<double>(t)), keys, values);
        merged.insert(merged.end(), attended.begin(), attended.end());
      }
      const nv::Vec after_attention = nv::add(h[t], nv::matvec(w.o, merged));
      next.push_back(nv::add(after_attention, nv::swiglu(nv::rms_norm(after_attention, w.post_norm, s.eps), w.gate,
                                                         w.up, w.down)));
    }
    h = next;
    // The last layer's feature is the final norm's output (HF's hidden_states[L]).
    std::vector<nv::Vec> feature = h;
    if (layer == c.num_hidden_layers - 1) {
      for (auto& ht : feature) ht = nv::rms_norm(ht, nv::to_vec(raw.at("model.norm.weight")), s.eps);
    }
    CAPTURE(layer);
    CHECK(torch::allclose(out.hidden_states[static_cast<size_t>(layer)][0], nv::to_tensor(feature), 1e-9, 1e-9));
  }
  std::vector<nv::Vec> logits;
  const nv::Mat head = nv::to_mat(raw.at("lm_head.weight"));
  for (const auto& ht : h) logits.push_back(nv::matvec(head, nv::rms_norm(ht, nv::to_vec(raw.at("model.norm.weight")), s.eps)));
  CHECK(torch::allclose(out.logits[0], nv::to_tensor(logits), 1e-9, 1e-9));
}

TEST_CASE("Model.Reference.DrafterMatchesNaiveLoops") {
  torch::set_num_threads(1);
  const DrafterSpec spec =
      dflow::target::testing::small_drafter_spec(/*num_layers=*/2, /*block_size=*/4, /*features=*/2);
  DFlashDrafter drafter(spec, /*init_seed=*/5);
  drafter->to(torch::kFloat64);
  // Larger weights than the 0.02 init so that every path visibly matters.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : drafter->parameters()) p.add_(torch::randn_like(p) * 0.3);
  }
  std::map<std::string, torch::Tensor> w;
  for (const auto& item : drafter->named_parameters()) w[item.key()] = item.value();
  const Shape s{spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim, spec.rms_norm_eps, spec.rope_theta};

  torch::manual_seed(9);
  const int64_t batch = 2, length = 9, block = spec.block_size, hidden = spec.hidden_size;
  const torch::Tensor features = torch::randn({batch, length, 2 * hidden}, torch::kFloat64);
  const torch::Tensor anchors = torch::tensor({1, 4, 6, 0, 0, 3, 7, 2}, torch::kInt64).view({batch, 4});
  const torch::Tensor keep = torch::tensor({1, 1, 1, 0, 1, 1, 1, 1}, torch::kInt64).view({batch, 4}).to(torch::kBool);
  const int64_t slots = 4 * block;
  const torch::Tensor embeddings = torch::randn({batch, slots, hidden}, torch::kFloat64);
  const torch::Tensor positions =
      (anchors.unsqueeze(-1) + torch::arange(block, torch::kInt64).view({1, 1, block})).view({batch, slots});

  for (const int64_t blocks_per_chunk : {1, 3, 0}) {
    CAPTURE(blocks_per_chunk);
    const BlockAttentionPlan plan = plan_block_attention(anchors, keep, length, block, blocks_per_chunk, torch::kCPU);
    const torch::Tensor out = drafter->forward(features, embeddings, positions, plan);  // [B, slots, H]
    for (int64_t b = 0; b < batch; ++b) {
      const nv::Mat fc = nv::to_mat(w.at("fc.weight"));
      std::vector<nv::Vec> context;
      for (int64_t c = 0; c < length; ++c) {
        context.push_back(nv::rms_norm(nv::matvec(fc, nv::to_vec(features[b][c])), nv::to_vec(w.at("hidden_norm.weight")), s.eps));
      }
      std::vector<nv::Vec> h;
      for (int64_t i = 0; i < slots; ++i) h.push_back(nv::to_vec(embeddings[b][i]));
      for (int64_t layer = 0; layer < spec.num_layers; ++layer) {
        const NaiveLayer lw = naive_layer(w, "layers." + std::to_string(layer) + ".");
        std::vector<nv::Vec> x, next;
        for (const auto& hi : h) x.push_back(nv::rms_norm(hi, lw.input_norm, s.eps));
        for (int64_t i = 0; i < slots; ++i) {
          const int64_t j = i / block, anchor = anchors[b][j].item<int64_t>();
          const bool kept = keep[b][j].item<bool>();
          nv::Vec merged;
          for (int64_t head = 0; head < s.heads; ++head) {
            const int64_t kv_head = head / (s.heads / s.kv_heads);
            std::vector<nv::Vec> keys, values;
            if (kept) {
              for (int64_t c = 0; c < anchor; ++c) {  // strictly before the anchor
                keys.push_back(head_of(nv::matvec(lw.k, context[c]), kv_head, s, lw.k_norm, static_cast<double>(c)));
                values.push_back(value_head(nv::matvec(lw.v, context[c]), kv_head, s));
              }
              for (int64_t m = j * block; m < (j + 1) * block; ++m) {  // own block, both directions
                keys.push_back(head_of(nv::matvec(lw.k, x[m]), kv_head, s, lw.k_norm, static_cast<double>(anchor + m % block)));
                values.push_back(value_head(nv::matvec(lw.v, x[m]), kv_head, s));
              }
            }
            const nv::Vec q = head_of(nv::matvec(lw.q, x[i]), head, s, lw.q_norm, static_cast<double>(anchor + i % block));
            const nv::Vec attended = nv::attend(q, keys, values);
            merged.insert(merged.end(), attended.begin(), attended.end());
          }
          const nv::Vec after_attention = nv::add(h[i], nv::matvec(lw.o, merged));
          next.push_back(nv::add(after_attention,
                                 nv::swiglu(nv::rms_norm(after_attention, lw.post_norm, s.eps), lw.gate, lw.up, lw.down)));
        }
        h = next;
      }
      std::vector<nv::Vec> expected;
      for (const auto& hi : h) expected.push_back(nv::rms_norm(hi, nv::to_vec(w.at("norm.weight")), s.eps));
      CAPTURE(b);
      CHECK(torch::allclose(out[b], nv::to_tensor(expected), 1e-9, 1e-9));
    }
  }
}
