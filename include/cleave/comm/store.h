// Store: the key-value store the processes of one job share to rendezvous a communication backend
// (Gloo addresses, the NCCL unique id). The scheduler serves one (cluster layer); tests use the
// in-memory store with ranks as threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cleave::comm {

class Store {
 public:
  virtual ~Store() = default;
  // Sets `key` to `value`, replacing an earlier value.
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // The value of `key`, blocking until some process sets it. Throws a kUnavailable cleave::Error
  // naming the key and the timeout when `timeout` passes first.
  virtual std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Adds `delta` to the integer counter `key` (0 when unset) atomically and returns the result.
  // The counter is stored as its decimal text, so get() reads it as "42" in every store (the
  // scheduler's, the in-memory one); throws cleave::Error when `key` holds something else.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Whether every key is set, without blocking.
  virtual bool check(const std::vector<std::string>& keys) = 0;
};

// A store shared by the threads of this process: ranks as threads in tests, and the one rank of a
// standalone process (cleave::init() without a launcher).
std::shared_ptr<Store> make_memory_store();

// A view of `base` whose keys are prefixed with `prefix` + "/" (one namespace per group).
std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> base);

}  // namespace cleave::comm
