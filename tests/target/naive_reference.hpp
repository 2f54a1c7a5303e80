// An independent, deliberately naive implementation of the building blocks
// (plain loops over std::vector<double>, no torch ops), llm.c-style: the
// model code is checked against it, so it must not share code with model/.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace dflow::target::naive {

using Vec = std::vector<double>;

struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> data;  // row-major
  double at(int64_t r, int64_t c) const { return data[static_cast<size_t>(r * cols + c)]; }
};

inline Vec to_vec(const torch::Tensor& t) {
  const torch::Tensor flat = t.detach().to(torch::kCPU, torch::kFloat64).contiguous().view({-1});
  return Vec(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
}

inline Mat to_mat(const torch::Tensor& t) { return {t.size(0), t.size(1), to_vec(t)}; }

inline Vec matvec(const Mat& w, const Vec& x) {
  Vec y(static_cast<size_t>(w.rows), 0.0);
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) y[static_cast<size_t>(r)] += w.at(r, c) * x[static_cast<size_t>(c)];
  }
  return y;
}

inline Vec add(const Vec& a, const Vec& b) {
  Vec y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
  return y;
}

inline Vec slice(const Vec& x, size_t start, size_t length) { return Vec(x.begin() + start, x.begin() + start + length); }

inline Vec rms_norm(const Vec& x, const Vec& weight, double eps) {
  double mean_square = 0.0;
  for (const double v : x) mean_square += v * v;
  mean_square /= static_cast<double>(x.size());
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / std::sqrt(mean_square + eps) * weight[i];
  return y;
}

// NeoX rotate-half: pairs (i, i + D/2) rotate by position * theta^(-2i/D).
inline Vec rope(const Vec& head, double position, double theta) {
  const size_t half = head.size() / 2;
  Vec y(head.size());
  for (size_t i = 0; i < half; ++i) {
    const double angle = position * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head.size()));
    y[i] = head[i] * std::cos(angle) - head[i + half] * std::sin(angle);
    y[i + half] = head[i + half] * std::cos(angle) + head[i] * std::sin(angle);
  }
  return y;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// softmax(q.k / sqrt(D)) v over the given keys; zeros when there are none.
inline Vec attend(const Vec& q, const std::vector<Vec>& keys, const std::vector<Vec>& values) {
  Vec out(q.size(), 0.0);
  if (keys.empty()) return out;
  std::vector<double> scores;
  double max_score = -1e300;
  for (const Vec& k : keys) {
    scores.push_back(dot(q, k) / std::sqrt(static_cast<double>(q.size())));
    max_score = std::max(max_score, scores.back());
  }
  double total = 0.0;
  for (double& s : scores) total += (s = std::exp(s - max_score));
  for (size_t j = 0; j < keys.size(); ++j) {
    for (size_t i = 0; i < q.size(); ++i) out[i] += scores[j] / total * values[j][i];
  }
  return out;
}

inline Vec swiglu(const Vec& x, const Mat& gate, const Mat& up, const Mat& down) {
  const Vec g = matvec(gate, x), u = matvec(up, x);
  Vec a(g.size());
  for (size_t i = 0; i < g.size(); ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return matvec(down, a);
}

inline torch::Tensor to_tensor(const std::vector<Vec>& rows) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows.front().size())},
                                 torch::kFloat64);
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t c = 0; c < rows[r].size(); ++c) t[static_cast<int64_t>(r)][static_cast<int64_t>(c)] = rows[r][c];
  }
  return t;
}

}  // namespace dflow::target::naive
