#pragma once
// A registry of named plug-ins (the drafter kinds, the losses): the built-in
// ones first, then any added at run time (a test's own kind); names unique.
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dflow::drafter {

template <class T>
class NamedRegistry {
 public:
  // `what` names an entry in messages ("drafter kind", "loss").
  NamedRegistry(std::string what, std::vector<std::shared_ptr<const T>> builtin) : what_(std::move(what)) {
    for (auto& entry : builtin) add(std::move(entry));
  }

  const T* find(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : it->second.get();
  }
  // Throws std::invalid_argument naming the known entries.
  const T& get(const std::string& name) const {
    if (const T* entry = find(name)) return *entry;
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown " + what_ + " '" + name + "' (known: " + known + ")");
  }
  std::vector<std::string> names() const {  // sorted
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [name, entry] : entries_) out.push_back(name);
    return out;
  }
  // A name taken twice throws std::logic_error.
  void add(std::shared_ptr<const T> entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string name = entry->name();
    if (!entries_.emplace(name, std::move(entry)).second)
      throw std::logic_error(what_ + " '" + name + "' is registered twice");
  }

 private:
  std::string what_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const T>> entries_;
};

}  // namespace dflow::drafter
