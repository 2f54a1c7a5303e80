#include "drafter/cpu_memory_counter.hpp"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace dflow::model {

namespace {

std::atomic<int64_t> current{0}, peak{0};
std::atomic<bool> installed{false};

void count(int64_t delta) {
  const int64_t now = current.fetch_add(delta) + delta;
  int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

// Wraps the allocator it replaces. Each storage's DataPtr has its data as
// its context (as LibTorch's raw_allocate needs: the conv kernels allocate
// through it) and is released through raw_deleter; its size and the wrapped
// DataPtr are kept in a table by data address.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}
  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr inner = inner_->allocate(bytes);
    void* data = inner.get();
    if (data == nullptr) return inner;  // zero bytes: nothing to count, and no address to key
    const c10::Device device = inner.device();
    {
      const std::lock_guard<std::mutex> lock(table_mutex());
      table().emplace(data, Held{std::move(inner), static_cast<int64_t>(bytes)});
    }
    count(static_cast<int64_t>(bytes));
    return {data, data, &release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
  c10::Allocator* inner() const { return inner_; }

 private:
  struct Held {
    c10::DataPtr inner;
    int64_t bytes;
  };
  // Never destroyed: storages may be freed during static destruction.
  static std::unordered_map<void*, Held>& table() {
    static auto* held = new std::unordered_map<void*, Held>();
    return *held;
  }
  static std::mutex& table_mutex() {
    static auto* mutex = new std::mutex();
    return *mutex;
  }
  static void release(void* data) {
    std::unordered_map<void*, Held>::node_type node;
    {
      const std::lock_guard<std::mutex> lock(table_mutex());
      node = table().extract(data);
    }
    if (node.empty()) return;
    count(-node.mapped().bytes);
  }  // the wrapped DataPtr frees the memory here, outside the lock
  c10::Allocator* inner_;
};

// Never destroyed: storages counted by it may outlive the counter.
CountingAllocator* counting = nullptr;
c10::Allocator* previous = nullptr;

}  // namespace

CpuMemoryCounter::CpuMemoryCounter() {
  if (installed.exchange(true)) throw std::logic_error("CpuMemoryCounter: one is installed already");
  previous = c10::GetCPUAllocator();
  if (counting == nullptr || counting->inner() != previous) counting = new CountingAllocator(previous);
  current = 0;
  peak = 0;
  c10::SetCPUAllocator(counting, /*priority=*/255);
}

CpuMemoryCounter::~CpuMemoryCounter() {
  c10::SetCPUAllocator(previous, /*priority=*/255);
  installed = false;
}

int64_t CpuMemoryCounter::current_bytes() const { return current.load(); }
int64_t CpuMemoryCounter::peak_bytes() const { return peak.load(); }
void CpuMemoryCounter::reset_peak() { peak = current.load(); }

}  // namespace dflow::model
