#include "bench/gloo_baseline.h"

#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace geoloco::bench {

namespace {

// One rank: join the ring, check one all-reduce's sum, then time `repeats`.
// Returns the line the parent reads: "ok SECONDS" or "error MESSAGE".
std::string run_rank(const std::string& store_dir, int rank, int ranks, std::size_t count, int repeats) {
  try {
    gloo::rendezvous::FileStore store(store_dir);
    // Not 127.0.0.1, where every other geoloco test listens and dials: a
    // test's proxy or daemon retrying the port of a site that is down could
    // reach a Gloo rank that the kernel gave that same free port, and Gloo
    // fails a pair on a stray connection ("Connection closed by peer"), seen
    // once while the fault scenarios ran beside this bench. 127.0.0.0/8 is
    // loopback on Linux, and nothing in the project uses 127.0.0.2.
    gloo::transport::tcp::attr attr("127.0.0.2");
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
    context->setTimeout(std::chrono::seconds(60));
    context->connectFullMesh(store, device);
    std::vector<float> data(count, static_cast<float>(rank + 1));
    std::vector<float*> pointers{data.data()};
    gloo::AllreduceRing<float> algorithm(context, pointers, static_cast<int>(count));
    algorithm.run();  // warm-up, and the check that the ring sums
    const float expected = static_cast<float>(ranks * (ranks + 1) / 2);
    if (data[0] != expected || data[count - 1] != expected)
      return "error rank " + std::to_string(rank) + " holds " + std::to_string(data[0]) + ", expected " +
             std::to_string(expected);
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < repeats; ++r) {
      std::fill(data.begin(), data.end(), static_cast<float>(rank + 1));
      // Gloo has no barrier helper here; a tiny all-reduce lines the ranks up.
      std::vector<float> one(1, 0.0f);
      std::vector<float*> one_ptr{one.data()};
      gloo::AllreduceRing<float>(context, one_ptr, 1).run();
      const auto start = std::chrono::steady_clock::now();
      algorithm.run();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    char line[64];
    std::snprintf(line, sizeof line, "ok %.9f", best);
    return line;
  } catch (const std::exception& e) {
    return std::string("error ") + e.what();
  }
}

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

std::string read_all(int fd) {
  std::string text;
  char buffer[256];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return text;
    text.append(buffer, static_cast<std::size_t>(n));
  }
}

}  // namespace

Result<double> gloo_allreduce_seconds(int ranks, std::size_t count, int repeats) {
  std::string pattern = (std::filesystem::temp_directory_path() / "geoloco-gloo-XXXXXX").string();
  GEOLOCO_RETURN_IF(::mkdtemp(pattern.data()) == nullptr, Err::io, "gloo baseline: mkdtemp: ", std::strerror(errno));
  const std::string store_dir = pattern;
  std::cout.flush();
  std::cerr.flush();
  std::vector<pid_t> children;
  std::vector<int> pipes;
  Status failure;
  for (int rank = 0; rank < ranks; ++rank) {
    int fds[2];
    if (::pipe(fds) != 0) {
      failure = Status(Err::io, cat("gloo baseline: pipe: ", std::strerror(errno)));
      break;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      for (int fd : pipes) ::close(fd);
      write_all(fds[1], run_rank(store_dir, rank, ranks, count, repeats));
      ::_exit(0);
    }
    ::close(fds[1]);
    if (pid < 0) {
      ::close(fds[0]);
      failure = Status(Err::io, cat("gloo baseline: fork: ", std::strerror(errno)));
      break;
    }
    children.push_back(pid);
    pipes.push_back(fds[0]);
  }
  if (!failure.ok())  // the ranks already started cannot meet the rest: stop them
    for (pid_t pid : children) ::kill(pid, SIGKILL);
  double slowest = 0;
  for (std::size_t i = 0; i < children.size(); ++i) {
    const std::string line = read_all(pipes[i]);
    ::close(pipes[i]);
    int wstatus = 0;
    while (::waitpid(children[i], &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (!failure.ok()) continue;
    if (line.rfind("ok ", 0) == 0) {
      slowest = std::max(slowest, std::strtod(line.c_str() + 3, nullptr));
    } else {
      failure = Status(Err::internal, cat("gloo rank ", i, ": ",
                                          line.empty() ? cat("exited without a result (status ", wstatus, ")")
                                                       : line.substr(line.rfind("error ", 0) == 0 ? 6 : 0)));
      for (std::size_t j = i + 1; j < children.size(); ++j) ::kill(children[j], SIGKILL);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(store_dir, ec);
  if (!failure.ok()) return failure;
  return slowest;
}

}  // namespace geoloco::bench
