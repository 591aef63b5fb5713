// The in-memory store (ranks as threads; the store of a standalone process) and the prefix view
// (one namespace per group).
#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>

#include "cleave/comm/store.h"
#include "cleave/core/error.h"

namespace cleave::comm {
namespace {

class MemoryStore final : public Store {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
  }

  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool found = changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; });
    if (!found) {
      CLEAVE_UNAVAILABLE(
          "store key '{}' was not set within {} ms; the process that should set it has not "
          "arrived",
          key, timeout.count());
    }
    return values_.at(key);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t value = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<uint8_t>& slot = values_[key];
      const std::string text(slot.begin(), slot.end());
      if (!text.empty()) {
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        CLEAVE_CHECK_ARG(error == std::errc() && end == text.data() + text.size(),
                         "store key '{}' holds '{}', which is not an integer counter", key, text);
      }
      value += delta;
      const std::string sum = std::to_string(value);
      slot.assign(sum.begin(), sum.end());
    }
    changed_.notify_all();
    return value;
  }

  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string& key : keys) {
      if (values_.count(key) == 0) return false;
    }
    return true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<uint8_t>> values_;
};

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base)
      : prefix_(std::move(prefix) + "/"), base_(std::move(base)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    base_->set(prefix_ + key, value);
  }
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return base_->get(prefix_ + key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return base_->add(prefix_ + key, delta);
  }
  bool check(const std::vector<std::string>& keys) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const std::string& key : keys) full.push_back(prefix_ + key);
    return base_->check(full);
  }

 private:
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store() { return std::make_shared<MemoryStore>(); }

std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> base) {
  CLEAVE_CHECK_ARG(base != nullptr, "make_prefix_store('{}'): the base store is null", prefix);
  return std::make_shared<PrefixStore>(std::move(prefix), std::move(base));
}

}  // namespace cleave::comm
