// SPDX-License-Identifier: Apache-2.0
// A stand-in nvidia-cuda-mps-control for CI, which has no GPU: enough of the real one for tgs-node
// to manage it and for the fake driver to find it.
//
//   nvidia-cuda-mps-control -d   starts the daemon in the background: it creates its pipe folder
//                                (CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps) with a
//                                `control` FIFO and `nvidia-cuda-mps-control.pid`, and its log
//                                folder (CUDA_MPS_LOG_DIRECTORY, default /var/log/nvidia-mps) with
//                                `control.log`; the starting process returns once it is ready.
//   nvidia-cuda-mps-control      reads commands on stdin and hands them to the daemon of
//                                CUDA_MPS_PIPE_DIRECTORY; `quit` makes it remove its files and
//                                exit. No daemon there: "Cannot find MPS control daemon process",
//                                status 1, as the real one.
//
// The daemon logs its start (with the CUDA_VISIBLE_DEVICES it was given) and every command to
// control.log. Tests set TGS_FAKE_MPS_FAIL=1 for a daemon that fails to start. SIGTERM ends it as
// `quit` does.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <string>

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

const std::string pipe_dir = env_or("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps");
const std::string log_dir = env_or("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps");
const std::string control_path = pipe_dir + "/control";
const std::string pid_path = pipe_dir + "/nvidia-cuda-mps-control.pid";

volatile sig_atomic_t stop = 0;
void on_term(int) { stop = 1; }

void log_line(const std::string& text) {
  const int fd = ::open((log_dir + "/control.log").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  char stamp[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "[%Y-%m-%d %H:%M:%S] ", std::localtime(&t));
  const std::string line = stamp + text + "\n";
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

bool make_dirs(const std::string& path) {
  for (std::size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    if (::mkdir(path.substr(0, at).c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

/// The pid of a live daemon of this pipe folder, or 0.
pid_t running_daemon() {
  FILE* f = std::fopen(pid_path.c_str(), "r");
  if (f == nullptr) return 0;
  long pid = 0;
  const bool read = std::fscanf(f, "%ld", &pid) == 1;
  std::fclose(f);
  return read && pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == 0 ? static_cast<pid_t>(pid) : 0;
}

void clean_up() {
  ::unlink(control_path.c_str());
  ::unlink(pid_path.c_str());
}

/// The daemon: serve commands from the FIFO until `quit` or SIGTERM.
[[noreturn]] void serve(int ready_fd) {
  ::setsid();
  struct sigaction sa{};
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGHUP, SIG_IGN);
  ::unlink(control_path.c_str());
  if (::mkfifo(control_path.c_str(), 0600) != 0) {
    log_line(std::string("cannot create ") + control_path + ": " + std::strerror(errno));
    _exit(1);
  }
  // Read-write, so the FIFO always has a writer: reads block instead of seeing end of file.
  const int fifo = ::open(control_path.c_str(), O_RDWR | O_CLOEXEC);
  FILE* pid_file = std::fopen(pid_path.c_str(), "w");
  if (fifo < 0 || pid_file == nullptr) _exit(1);
  std::fprintf(pid_file, "%d\n", static_cast<int>(::getpid()));
  std::fclose(pid_file);
  log_line("Startup (fake control daemon, pid " + std::to_string(::getpid()) +
           ", CUDA_VISIBLE_DEVICES=" + env_or("CUDA_VISIBLE_DEVICES", "-") + ")");
  const int devnull = ::open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    if (devnull > 2) ::close(devnull);
  }
  const char ok = 1;
  (void)!::write(ready_fd, &ok, 1);
  ::close(ready_fd);
  std::string pending;
  char buffer[256];
  while (stop == 0) {
    const ssize_t n = ::read(fifo, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<std::size_t>(n));
    for (std::size_t end; (end = pending.find('\n')) != std::string::npos;) {
      const std::string command = pending.substr(0, end);
      pending.erase(0, end + 1);
      log_line("Command: " + command);
      if (command == "quit") stop = 1;
    }
  }
  log_line("Exit");
  clean_up();
  _exit(0);
}

int start_daemon() {
  if (std::getenv("TGS_FAKE_MPS_FAIL") != nullptr) {
    std::fprintf(stderr, "fake nvidia-cuda-mps-control: failing to start (TGS_FAKE_MPS_FAIL)\n");
    return 1;
  }
  if (!make_dirs(pipe_dir) || !make_dirs(log_dir)) {
    std::fprintf(stderr, "fake nvidia-cuda-mps-control: cannot create %s or %s\n", pipe_dir.c_str(), log_dir.c_str());
    return 1;
  }
  if (running_daemon() != 0) {
    std::fprintf(stderr, "An instance of this daemon is already running\n");
    return 1;
  }
  int ready[2];
  if (::pipe(ready) != 0) return 1;
  const pid_t child = ::fork();
  if (child < 0) return 1;
  if (child == 0) {
    ::close(ready[0]);
    serve(ready[1]);
  }
  ::close(ready[1]);
  char ok = 0;
  const bool started = ::read(ready[0], &ok, 1) == 1 && ok == 1;
  ::close(ready[0]);
  return started ? 0 : 1;
}

int send_commands() {
  const int fifo = ::open(control_path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fifo < 0 || running_daemon() == 0) {
    if (fifo >= 0) ::close(fifo);
    std::fprintf(stderr, "Cannot find MPS control daemon process\n");
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    line += '\n';
    if (::write(fifo, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      ::close(fifo);
      return 1;
    }
  }
  ::close(fifo);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "-d") == 0) return start_daemon();
  if (argc > 1) {
    std::fprintf(stderr, "usage: nvidia-cuda-mps-control [-d]   (the fake of tgs's tests)\n");
    return 2;
  }
  return send_commands();
}
