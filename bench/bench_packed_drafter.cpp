// The drafter's side of packing, alone: the DFlash loss forward + backward
// on the same samples laid out two ways, as pad_bucket.token_budget lays
// them out (one sample per row, padded to its length bucket, rows per batch
// by the token budget) and as pad_bucket.pack does (whole samples end to end
// in rows of max_length, first-fit decreasing). Same drafter, same anchors
// rule, random target features; real (unpadded) tokens per second of the
// drafter's work, the two layouts alternating for several rounds.
//
// bench_packing times the whole graph; this isolates the node packing can
// slow down (the drafter: its work grows with anchors, and packing changes
// how its block attention is cut), so a change to block attention can be
// measured in seconds, not minutes.
//
//   bench_packed_drafter [--rounds 3] [--threads 1] [--samples 384]
//                        [--lengths 112,144] [--prompt 16,48] [--anchors 16]
//                        [--max-length 256] [--buckets 64,128,256] [--budget 2048]
//                        [--profile]   (one pass of each under LibTorch's profiler:
//                                       the operators with the most self time)
// Defaults: the demo's data and shapes (its drafter, one layer, block 16).
#include <torch/torch.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "drafter/objective.hpp"
#include "target/tiny_target.hpp"
#include <torch/csrc/autograd/profiler_kineto.h>

namespace {

using namespace dflow::target;
using namespace dflow::drafter;

struct Options {
  int rounds = 3, threads = 1;
  bool profile = false;
  int64_t samples = 384, min_length = 112, max_sample_length = 144, min_prompt = 16, max_prompt = 48;
  int64_t anchors = 16, max_length = 256, budget = 2048;
  std::vector<int64_t> buckets = {64, 128, 256};
};

std::vector<int64_t> int_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--profile") {
      o.profile = true;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument("missing value after " + arg);
    const std::string value = argv[++i];
    auto pair = [&](int64_t& a, int64_t& b) {
      const auto v = int_list(value);
      if (v.size() != 2 || v[0] > v[1]) throw std::invalid_argument(arg + " takes LO,HI");
      a = v[0];
      b = v[1];
    };
    if (arg == "--rounds") o.rounds = std::stoi(value);
    else if (arg == "--threads") o.threads = std::stoi(value);
    else if (arg == "--samples") o.samples = std::stoll(value);
    else if (arg == "--lengths") pair(o.min_length, o.max_sample_length);
    else if (arg == "--prompt") pair(o.min_prompt, o.max_prompt);
    else if (arg == "--anchors") o.anchors = std::stoll(value);
    else if (arg == "--max-length") o.max_length = std::stoll(value);
    else if (arg == "--budget") o.budget = std::stoll(value);
    else if (arg == "--buckets") o.buckets = int_list(value);
    else throw std::invalid_argument("unknown option " + arg);
  }
  if (o.rounds < 1 || o.threads < 1 || o.samples < 1 || o.anchors < 1 || o.buckets.empty() ||
      !std::is_sorted(o.buckets.begin(), o.buckets.end()) || o.buckets.back() < o.max_sample_length) {
    throw std::invalid_argument("--rounds, --threads, --samples and --anchors must be >= 1, and --buckets increasing "
                                "up to the longest sample");
  }
  if (o.max_sample_length > o.max_length || o.max_prompt + 2 >= o.min_length) {
    throw std::invalid_argument("samples must fit max_length and keep a response after the prompt");
  }
  return o;
}

struct Sample {
  int64_t length = 0, prompt = 0;
  std::vector<int64_t> tokens;
};

struct Batch {
  torch::Tensor input_ids, loss_mask, lengths, features, position_ids, document_ids;
  int64_t index = 0, real_tokens = 0;
  bool packed() const { return document_ids.defined(); }
};

// rows: each row's samples, laid out end to end and padded to `width`.
Batch collate(const std::vector<Sample>& samples, const std::vector<std::vector<size_t>>& rows, int64_t width,
              bool packed, int64_t features_width, int64_t index) {
  const auto count = static_cast<int64_t>(rows.size());
  Batch b;
  b.index = index;
  b.input_ids = torch::zeros({count, width}, torch::kInt64);
  b.loss_mask = torch::zeros({count, width}, torch::kInt64);
  b.lengths = torch::zeros({count}, torch::kInt64);
  if (packed) {
    b.position_ids = torch::zeros({count, width}, torch::kInt64);
    b.document_ids = torch::zeros({count, width}, torch::kInt32);
  }
  for (int64_t r = 0; r < count; ++r) {
    int64_t used = 0, document = 0;
    for (const size_t s : rows[static_cast<size_t>(r)]) {
      const Sample& sample = samples[s];
      for (int64_t t = 0; t < sample.length; ++t) {
        b.input_ids[r][used + t] = sample.tokens[static_cast<size_t>(t)];
        b.loss_mask[r][used + t] = t >= sample.prompt ? 1 : 0;
        if (packed) {
          b.position_ids[r][used + t] = t;
          b.document_ids[r][used + t] = static_cast<int32_t>(document);
        }
      }
      used += sample.length;
      document += 1;
    }
    b.lengths[r] = used;
    b.real_tokens += used;
    if (packed) {  // padding: one more document, positions from 0
      for (int64_t t = used; t < width; ++t) {
        b.position_ids[r][t] = t - used;
        b.document_ids[r][t] = static_cast<int32_t>(document);
      }
    }
  }
  b.features = torch::randn({count, width, features_width});
  return b;
}

std::vector<Batch> token_budget_batches(const std::vector<Sample>& samples, const Options& o, int64_t features_width) {
  std::vector<Batch> out;
  for (size_t k = 0; k < o.buckets.size(); ++k) {
    const int64_t bucket = o.buckets[k], lower = k == 0 ? 0 : o.buckets[k - 1];
    const int64_t per_batch = std::max<int64_t>(1, o.budget / bucket);
    std::vector<std::vector<size_t>> rows;
    for (size_t s = 0; s < samples.size(); ++s) {
      if (samples[s].length <= lower || samples[s].length > bucket) continue;
      rows.push_back({s});
      if (static_cast<int64_t>(rows.size()) == per_batch) {
        out.push_back(collate(samples, rows, bucket, false, features_width, static_cast<int64_t>(out.size())));
        rows.clear();
      }
    }
    if (!rows.empty()) out.push_back(collate(samples, rows, bucket, false, features_width, static_cast<int64_t>(out.size())));
  }
  return out;
}

std::vector<Batch> packed_batches(const std::vector<Sample>& samples, const Options& o, int64_t features_width) {
  std::vector<size_t> order(samples.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return samples[a].length > samples[b].length; });
  std::vector<std::vector<size_t>> rows;
  std::vector<int64_t> free;
  for (const size_t s : order) {  // first fit, longest first
    size_t r = 0;
    while (r < rows.size() && free[r] < samples[s].length) ++r;
    if (r == rows.size()) {
      rows.emplace_back();
      free.push_back(o.max_length);
    }
    rows[r].push_back(s);
    free[r] -= samples[s].length;
  }
  const auto per_batch = static_cast<size_t>(std::max<int64_t>(1, o.budget / o.max_length));
  std::vector<Batch> out;
  for (size_t first = 0; first < rows.size(); first += per_batch) {
    const std::vector<std::vector<size_t>> part(rows.begin() + static_cast<ptrdiff_t>(first),
                                                rows.begin() + static_cast<ptrdiff_t>(std::min(rows.size(), first + per_batch)));
    out.push_back(collate(samples, part, o.max_length, true, features_width, static_cast<int64_t>(out.size())));
  }
  return out;
}

// --profile: one pass over each layout under LibTorch's profiler; prints the
// operators with the most self time (own time, children excluded).
void profile_pass(const char* label, const std::function<void()>& pass) {
  namespace profiler = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  profiler::prepareProfiler(config, {ActivityType::CPU});
  profiler::enableProfiler(config, {ActivityType::CPU});
  pass();
  const auto result = profiler::disableProfiler();
  struct Event {
    uint64_t start, end, thread;
    std::string name;
  };
  std::vector<Event> events;
  for (const auto& e : result->events()) events.push_back({e.startNs(), e.endNs(), e.startThreadId(), e.name()});
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.start < b.start || (a.start == b.start && a.end > b.end); });
  // Self time: an event's duration less its directly nested events'.
  std::vector<double> children(events.size(), 0.0);
  std::map<uint64_t, std::vector<size_t>> open;  // per thread: the enclosing events
  for (size_t i = 0; i < events.size(); ++i) {
    auto& stack = open[events[i].thread];
    while (!stack.empty() && events[stack.back()].end <= events[i].start) stack.pop_back();
    if (!stack.empty()) children[stack.back()] += static_cast<double>(events[i].end - events[i].start);
    stack.push_back(i);
  }
  std::map<std::string, std::pair<double, int64_t>> self;  // seconds, calls
  double total = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const double s = (static_cast<double>(events[i].end - events[i].start) - children[i]) * 1e-9;
    self[events[i].name].first += s;
    self[events[i].name].second += 1;
    total += s;
  }
  std::vector<std::pair<double, std::string>> top;
  for (const auto& [name, value] : self) top.emplace_back(value.first, name + " x" + std::to_string(value.second));
  std::sort(top.rbegin(), top.rend());
  std::printf("%s: %.3f s of operator self time; the largest:\n", label, total);
  for (size_t i = 0; i < top.size() && i < 25; ++i) std::printf("  %8.4f s  %s\n", top[i].first, top[i].second.c_str());
}

struct Timing {
  double seconds = 0;
  int64_t real_tokens = 0, padded_tokens = 0, anchors = 0;
};

Timing run(DFlashDrafter& drafter, const torch::Tensor& embedding, const torch::Tensor& lm_head,
           const std::vector<Batch>& batches, const Options& o) {
  ObjectiveOptions objective;
  objective.loss_decay_gamma = 7.0;
  Timing t;
  for (const Batch& b : batches) {
    AnchorSamplingOptions sampling;
    sampling.anchors_per_sequence = o.anchors;
    sampling.seed = 1234;
    sampling.batch_index = b.index;
    const auto start = std::chrono::steady_clock::now();
    const AnchorBatch anchors = b.packed() ? sample_packed_anchors(b.loss_mask, b.lengths, b.document_ids, sampling)
                                           : sample_anchors(b.loss_mask, b.lengths, sampling);
    const PackedDocuments documents{b.position_ids, b.document_ids};
    drafter->zero_grad();
    const ObjectiveOutput out = dflash_loss(*drafter, embedding, lm_head, b.features, b.input_ids, b.loss_mask,
                                            b.lengths, anchors, objective, b.packed() ? &documents : nullptr);
    out.loss_sum.backward();
    t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    t.real_tokens += b.real_tokens;
    t.padded_tokens += b.input_ids.numel();
    t.anchors += out.num_anchors;
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    torch::set_num_threads(o.threads);
    torch::manual_seed(0);
    // The demo's target shapes (TinyTargetOptions' defaults, as `dflow train`
    // makes runs/demo/target): the drafter borrows them.
    TinyTargetOptions target_options;
    target_options.out_dir = std::filesystem::temp_directory_path() / "dflow-bench-packed-drafter-target";
    const HFConfig target = make_tiny_target(target_options);
    std::filesystem::remove_all(target_options.out_dir);
    DrafterOptions drafter_options;
    drafter_options.num_layers = 1;
    drafter_options.block_size = 16;
    drafter_options.num_target_features = 3;
    DFlashDrafter drafter(make_drafter_spec(target, drafter_options), 0);
    const torch::Tensor embedding = torch::randn({target.vocab_size, target.hidden_size});
    const torch::Tensor lm_head = torch::randn({target.vocab_size, target.hidden_size}) * 0.05;

    std::mt19937_64 rng(7);
    std::vector<Sample> samples(static_cast<size_t>(o.samples));
    for (Sample& s : samples) {
      s.length = std::uniform_int_distribution<int64_t>(o.min_length, o.max_sample_length)(rng);
      s.prompt = std::uniform_int_distribution<int64_t>(o.min_prompt, o.max_prompt)(rng);
      for (int64_t t = 0; t < s.length; ++t) s.tokens.push_back(std::uniform_int_distribution<int64_t>(0, 509)(rng));
    }
    const int64_t features_width = 3 * target.hidden_size;
    const std::vector<Batch> budget = token_budget_batches(samples, o, features_width);
    const std::vector<Batch> packed = packed_batches(samples, o, features_width);
    run(drafter, embedding, lm_head, budget, o);  // warm-up
    run(drafter, embedding, lm_head, packed, o);

    if (o.profile) {
      profile_pass("token_budget", [&] { run(drafter, embedding, lm_head, budget, o); });
      profile_pass("pack", [&] { run(drafter, embedding, lm_head, packed, o); });
      return 0;
    }
    std::vector<double> budget_rate, packed_rate, ratio;
    Timing tb, tp;
    for (int round = 0; round < o.rounds; ++round) {
      tb = run(drafter, embedding, lm_head, budget, o);
      tp = run(drafter, embedding, lm_head, packed, o);
      budget_rate.push_back(static_cast<double>(tb.real_tokens) / tb.seconds);
      packed_rate.push_back(static_cast<double>(tp.real_tokens) / tp.seconds);
      ratio.push_back(packed_rate.back() / budget_rate.back());
      std::printf("round %d: drafter real tok/s token_budget %.0f (%.3f s), pack %.0f (%.3f s), ratio %.3f\n", round,
                  budget_rate.back(), tb.seconds, packed_rate.back(), tp.seconds, ratio.back());
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("layout        batches  real tokens  padded tokens  anchors  drafter real tok/s (median)\n");
    std::printf("token_budget  %7zu  %11lld  %13lld  %7lld  %.0f\n", budget.size(), static_cast<long long>(tb.real_tokens),
                static_cast<long long>(tb.padded_tokens), static_cast<long long>(tb.anchors), median(budget_rate));
    std::printf("pack          %7zu  %11lld  %13lld  %7lld  %.0f\n", packed.size(), static_cast<long long>(tp.real_tokens),
                static_cast<long long>(tp.padded_tokens), static_cast<long long>(tp.anchors), median(packed_rate));
    std::printf("drafter real tokens/s, pack / token_budget (median round): %.3f\n", median(ratio));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_packed_drafter: %s\n", e.what());
    return 2;
  }
}
