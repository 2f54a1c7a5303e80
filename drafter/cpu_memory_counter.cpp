#include "drafter/cpu_memory_counter.hpp"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <stdexcept>

namespace dflow::drafter {

namespace {

std::atomic<int64_t> current{0}, peak{0};
std::atomic<bool> installed{false};

void count(int64_t delta) {
  const int64_t now = current.fetch_add(delta) + delta;
  int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

// Wraps the allocator it replaces. Each storage's context is its data
// pointer (what raw_allocate asks of an allocator: bfloat16 matrix products
// on the CPU take their packing buffers raw), and the wrapped DataPtr and
// size are kept by that pointer until it is released.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) { inner_raw_deleter() = inner->raw_deleter(); }
  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr inner = inner_->allocate(bytes);
    void* data = inner.get();
    if (data == nullptr) return inner;  // nothing held
    const c10::Device device = inner.device();
    {
      const std::lock_guard<std::mutex> lock(mutex());
      // A pointer freed behind this allocator's back (a raw buffer released
      // after it was uninstalled) and reused: its old entry owns nothing.
      if (const auto stale = held().find(data); stale != held().end()) {
        (void)stale->second.inner.release_context();
        held().erase(stale);
      }
      held().emplace(data, Held{std::move(inner), static_cast<int64_t>(bytes)});
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
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::unordered_map<void*, Held>& held() {
    static auto* map = new std::unordered_map<void*, Held>();  // outlives storages freed at exit
    return *map;
  }
  static c10::DeleterFnPtr& inner_raw_deleter() {
    static c10::DeleterFnPtr deleter = nullptr;
    return deleter;
  }
  static void release(void* data) {
    Held freed;
    {
      const std::lock_guard<std::mutex> lock(mutex());
      const auto it = held().find(data);
      if (it == held().end()) {
        // A raw buffer the wrapped allocator gave before this one was
        // installed, freed through the CPU allocator of now (oneDNN's).
        if (inner_raw_deleter() != nullptr) inner_raw_deleter()(data);
        return;
      }
      freed = std::move(it->second);
      held().erase(it);
    }
    count(-freed.bytes);
  }  // `freed` releases the storage through the wrapped allocator
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

}  // namespace dflow::drafter
