#include "drafter/cpu_memory_counter.hpp"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

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

// Wraps the allocator it replaces; each storage carries its size and the
// wrapped DataPtr, released through it.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}
  c10::DataPtr allocate(size_t bytes) override {
    auto* held = new Held{inner_->allocate(bytes), static_cast<int64_t>(bytes)};
    count(held->bytes);
    void* data = held->inner.get();
    const c10::Device device = held->inner.device();
    return {data, held, &release, device};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
  c10::Allocator* inner() const { return inner_; }

 private:
  struct Held {
    c10::DataPtr inner;
    int64_t bytes;
  };
  static void release(void* context) {
    auto* held = static_cast<Held*>(context);
    count(-held->bytes);
    delete held;
  }
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
