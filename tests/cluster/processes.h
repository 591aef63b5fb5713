// Real processes for the cluster tests: start programs with extra environment variables and their
// output in a log file, wait for them with a timeout, and kill whatever is left at the end.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace cleave::testing {

// A port that was free a moment ago on 127.0.0.1.
inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

inline std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Polls `path` until it contains `text`; false after `timeout`.
inline bool wait_for_text(const std::string& path, const std::string& text,
                          std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (read_text(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Owns the processes it started: the destructor SIGKILLs and reaps those still running.
class Processes {
 public:
  explicit Processes(std::string name) {
    dir_ = std::filesystem::temp_directory_path() /
           ("cleave_" + name + "_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~Processes() {
    for (pid_t pid : running_) kill(pid, SIGCONT), kill(pid, SIGKILL);
    for (pid_t pid : running_) waitpid(pid, nullptr, 0);
    std::filesystem::remove_all(dir_);
  }

  std::string path(const std::string& file) const { return (dir_ / file).string(); }

  // Starts argv with this environment minus every MS_*, CLEAVE_*, OMPI_* and RANK_* variable and
  // OMP_NUM_THREADS (the tests choose the processes' threads), plus `env`; stdout and stderr go
  // to path(log).
  pid_t start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              const std::string& log) {
    std::vector<std::string> entries;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      std::string text = *entry;
      if (text.rfind("MS_", 0) == 0 || text.rfind("CLEAVE_", 0) == 0 ||
          text.rfind("OMPI_", 0) == 0 || text.rfind("RANK_", 0) == 0 ||
          text.rfind("OMP_NUM_THREADS=", 0) == 0) {
        continue;
      }
      entries.push_back(text);
    }
    for (const auto& [key, value] : env) entries.push_back(key + "=" + value);
    std::vector<char*> envp;
    for (std::string& entry : entries) envp.push_back(entry.data());
    envp.push_back(nullptr);
    std::vector<std::string> args_storage = argv;
    std::vector<char*> args;
    for (std::string& arg : args_storage) args.push_back(arg.data());
    args.push_back(nullptr);
    std::string log_path = path(log);
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    close(fd);
    running_.push_back(pid);
    return pid;
  }

  // The exit status of `pid` (128 + signal when killed by one), or nullopt after `timeout`.
  std::optional<int> wait(pid_t pid, std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        std::erase(running_, pid);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() > end) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  std::filesystem::path dir_;
  std::vector<pid_t> running_;
};

}  // namespace cleave::testing
