#include "target/documents.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "target/layers.hpp"
#include "target/varlen_attention.hpp"

namespace dflow::target {

namespace {

void check_documents(const torch::Tensor& document_ids) {
  if (document_ids.dim() != 2) {
    throw std::invalid_argument("packed documents: document_ids must be [B, S], got " +
                                c10::str(document_ids.sizes()));
  }
}

}  // namespace

DocumentAttention prepare_document_attention(const torch::Tensor& document_ids, torch::Device device,
                                             torch::Dtype dtype) {
  check_documents(document_ids);
  DocumentAttention out;
  const bool flash_dtype = dtype == torch::kBFloat16 || dtype == torch::kFloat16;
  const torch::Tensor ids = document_ids.to(torch::kCPU, torch::kInt64).contiguous();
  const int64_t rows = ids.size(0), length = ids.size(1);
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < length; ++t) {
      if (t == 0 || id[r * length + t] != id[r * length + t - 1]) out.spans.push_back({r, t, 0});
      out.spans.back().length += 1;
    }
  }
  for (const DocumentSpan& span : out.spans) out.max_document_length = std::max(out.max_document_length, span.length);
  // The kernel is tried here at a head_dim it takes (does this GPU and build
  // run it at all?), and again at the model's head_dim when attending; the
  // spans stay for the per-document path either way.
  constexpr int64_t kTrialHeadDim = 64;
  if (device.is_cuda() && flash_dtype && use_varlen_attention(device, dtype, kTrialHeadDim)) {
    // Each document of each row is one sequence of the flattened [B * S] tokens.
    std::vector<int32_t> starts;
    starts.reserve(out.spans.size() + 1);
    for (const DocumentSpan& span : out.spans) starts.push_back(static_cast<int32_t>(span.row * length + span.start));
    starts.push_back(static_cast<int32_t>(rows * length));
    out.cu_seqlens = torch::tensor(starts, torch::kInt32).to(device);
  }
  return out;
}

torch::Tensor document_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        const DocumentAttention& documents) {
  const int64_t batch = q.size(0), heads = q.size(1), length = q.size(2), head_dim = q.size(3);
  if (!documents.varlen() || !use_varlen_attention(q.device(), q.scalar_type(), head_dim)) {
    // One causal call per document; the spans tile every row in order.
    std::vector<torch::Tensor> rows(static_cast<size_t>(batch));
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < documents.spans.size(); ++i) {
      const DocumentSpan& span = documents.spans[i];
      auto part = [&](const torch::Tensor& x) { return x.narrow(0, span.row, 1).narrow(2, span.start, span.length); };
      parts.push_back(grouped_attention(part(q), part(k), part(v), std::nullopt, /*causal=*/true));
      if (i + 1 == documents.spans.size() || documents.spans[i + 1].row != span.row) {
        rows.at(static_cast<size_t>(span.row)) = parts.size() == 1 ? parts.front() : torch::cat(parts, 2);
        parts.clear();
      }
    }
    for (const torch::Tensor& row : rows) {
      if (!row.defined() || row.size(2) != length) {
        throw std::invalid_argument("document_causal_attention: the documents do not tile the " +
                                    std::to_string(length) + "-token rows of the batch");
      }
    }
    return batch == 1 ? rows.front() : torch::cat(rows, 0);
  }
  // Flash attention's variable-length kernel: [total, heads, D], grouped KV heads natively.
  auto flat = [&](const torch::Tensor& x) { return x.transpose(1, 2).reshape({batch * length, x.size(1), head_dim}); };
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const auto result = at::_flash_attention_forward(flat(q), flat(k), flat(v), documents.cu_seqlens,
                                                   documents.cu_seqlens, documents.max_document_length,
                                                   documents.max_document_length, /*dropout_p=*/0.0,
                                                   /*is_causal=*/true, /*return_debug_mask=*/false, scale);
  return std::get<0>(result).view({batch, length, heads, head_dim}).transpose(1, 2);
}

DocumentBounds document_bounds(const torch::Tensor& document_ids) {
  check_documents(document_ids);
  const torch::Tensor ids = document_ids.to(torch::kCPU, torch::kInt64).contiguous();
  const int64_t rows = ids.size(0), length = ids.size(1);
  DocumentBounds bounds{torch::empty({rows, length}, torch::kInt64), torch::empty({rows, length}, torch::kInt64)};
  const int64_t* id = ids.data_ptr<int64_t>();
  int64_t* begin = bounds.begin.data_ptr<int64_t>();
  int64_t* end = bounds.end.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = r * length;
    int64_t first = 0;
    while (first < length) {
      int64_t last = first + 1;
      while (last < length && id[row + last] == id[row + first]) ++last;
      std::fill(begin + row + first, begin + row + last, first);
      std::fill(end + row + first, end + row + last, last);
      first = last;
    }
  }
  return bounds;
}

torch::Tensor sample_ordinals(const torch::Tensor& document_ids, const torch::Tensor& lengths) {
  const DocumentBounds bounds = document_bounds(document_ids);
  const int64_t rows = document_ids.size(0), length = document_ids.size(1);
  const torch::Tensor lengths_cpu = lengths.to(torch::kCPU, torch::kInt64);
  torch::Tensor ordinals = torch::full({rows, length}, -1, torch::kInt64);
  const auto document_end = bounds.end.accessor<int64_t, 2>();
  auto out = ordinals.accessor<int64_t, 2>();
  int64_t sample_index = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t real_length = std::min(lengths_cpu[r].item<int64_t>(), length);
    for (int64_t first = 0; first < real_length; ++sample_index) {
      const int64_t last = std::min(document_end[r][first], real_length);
      for (int64_t t = first; t < last; ++t) out[r][t] = sample_index;
      first = last;
    }
  }
  return ordinals;
}

}  // namespace dflow::target
