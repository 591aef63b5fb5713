// A Store of files in one folder, for ranks as processes of one host without a scheduler
// (benchmarks, tests that fork their ranks). Internal to comm; header only.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cleave/comm/store.h"

namespace cleave::comm {

// A Store shared by the processes of this host through files in one folder: a key is a file
// (written whole, then renamed into place), a counter a file updated under flock.
class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    const std::string tmp = path(key) + ".tmp" + std::to_string(getpid());
    std::ofstream(tmp, std::ios::binary)
        .write(reinterpret_cast<const char*>(value.data()),
               static_cast<std::streamsize>(value.size()));
    std::filesystem::rename(tmp, path(key));
  }
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!check({key})) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("FileStore: no key " + key);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::ifstream in(path(key), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    const std::string v = text.str();
    return {v.begin(), v.end()};
  }
  int64_t add(const std::string& key, int64_t delta) override {
    const int fd = open((dir_ + "/lock").c_str(), O_CREAT | O_RDWR, 0600);
    flock(fd, LOCK_EX);
    int64_t value = 0;
    if (check({key})) {
      const std::vector<uint8_t> v = get(key, std::chrono::milliseconds(1000));
      value = std::stoll(std::string(v.begin(), v.end()));
    }
    value += delta;
    const std::string text = std::to_string(value);
    set(key, {text.begin(), text.end()});
    flock(fd, LOCK_UN);
    close(fd);
    return value;
  }
  bool check(const std::vector<std::string>& keys) override {
    for (const std::string& k : keys) {
      if (!std::filesystem::exists(path(k))) return false;
    }
    return true;
  }

 private:
  std::string path(std::string key) const {
    std::replace(key.begin(), key.end(), '/', '%');
    return dir_ + "/" + key;
  }
  std::string dir_;
};

}  // namespace cleave::comm
