// The feature cache's storage dtypes: float32 keeps the features exactly,
// bfloat16 rounds as a cast does, float8_e4m3 keeps every value within
// e4m3's rounding of its row's scale, and a row of zeros stays zeros.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <vector>

#include "train/feature_cache.hpp"

using namespace dflow;

namespace {

torch::Tensor round_trip(const torch::Tensor& rows, data::FeatureDtype dtype) {
  std::vector<unsigned char> bytes;
  train::encode_feature_rows(rows, dtype, bytes);
  CHECK(bytes.size() == static_cast<size_t>(rows.size(0)) * data::feature_row_bytes(dtype, rows.size(1)));
  auto out = torch::full({rows.size(0), rows.size(1)}, 7.0f);
  train::decode_feature_rows(bytes, rows.size(0), dtype, out);
  return out;
}

// Rows of very different magnitudes, as a target's residual stream has
// (a few massive activations beside small ones).
torch::Tensor features() {
  torch::manual_seed(11);
  auto rows = torch::randn({9, 40}) * torch::logspace(-3, 3, 9).unsqueeze(1);
  rows[4][7] = 3000.0f;  // an outlier
  rows[8].zero_();
  return rows;
}

}  // namespace

TEST_CASE("FeatureCodec.float32_is_exact_and_bfloat16_rounds_as_a_cast") {
  const auto rows = features();
  CHECK(torch::equal(round_trip(rows, data::FeatureDtype::float32), rows));
  CHECK(torch::equal(round_trip(rows, data::FeatureDtype::bfloat16), rows.to(torch::kBFloat16).to(torch::kFloat32)));
  // From a bfloat16 target a bfloat16 cache is exact too.
  const auto bf16 = rows.to(torch::kBFloat16);
  CHECK(torch::equal(round_trip(bf16, data::FeatureDtype::bfloat16), bf16.to(torch::kFloat32)));
}

TEST_CASE("FeatureCodec.fp8_keeps_each_value_within_its_rows_rounding") {
  const auto rows = features();
  const auto back = round_trip(rows, data::FeatureDtype::float8_e4m3);
  const auto amax = rows.abs().amax(1, true);
  // e4m3: 3 mantissa bits, so a normal value is off by at most 2^-4 of
  // itself; values below the row's scale x 2^-6 (e4m3's smallest normal)
  // are off by at most half its smallest subnormal step, scale x 2^-10.
  const auto scale = amax / 448.0f;
  const auto bound = torch::maximum(rows.abs() * 0.0625f, scale * std::pow(2.0f, -10.0f)) + 1e-12f;
  CHECK((back - rows).abs().le(bound).all().item<bool>());
  // Each row's largest magnitude survives exactly (it maps onto 448).
  CHECK(torch::allclose(back.abs().amax(1, true), amax, 1e-6, 0));
  CHECK(back[8].abs().sum().item<float>() == 0.0f);
  // A quarter of float32's bytes plus the scale.
  CHECK(data::feature_row_bytes(data::FeatureDtype::float8_e4m3, 40) == 44);
}

TEST_CASE("FeatureCodec.decodes_into_a_view_of_a_batch") {
  const auto rows = features();
  std::vector<unsigned char> bytes;
  train::encode_feature_rows(rows.narrow(0, 0, 5), data::FeatureDtype::bfloat16, bytes);
  auto batch = torch::zeros({2, 8, 40});
  train::decode_feature_rows(bytes, 5, data::FeatureDtype::bfloat16, batch[1].narrow(0, 2, 5));
  CHECK(torch::equal(batch[1].narrow(0, 2, 5), rows.narrow(0, 0, 5).to(torch::kBFloat16).to(torch::kFloat32)));
  CHECK(batch[0].abs().sum().item<float>() == 0.0f);
  CHECK(batch[1].narrow(0, 0, 2).abs().sum().item<float>() == 0.0f);
}
