// geoloco-train --backend cuda where it cannot run: refused before any
// worker, data or daemon connection, with exit code 2 and one exact line on
// stderr:
//   built without CUDA:  "geoloco-train: --backend cuda: this geoloco-train was built without CUDA (no nvcc at build
//   time)" no device:           "geoloco-train: --backend cuda: no CUDA device: cudaGetDeviceCount returned <name>
//   (<text>)"
// In a CUDA build the expected line is made from this process's own
// cudaGetDeviceCount, so the test names the same result the binary saw. On
// a machine with a GPU the refusal cannot happen: the case says
// "SKIPPED: a CUDA device is present" (ctest reports a skip) and
// scripts/gpu-check.sh trains with --backend cuda instead.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "inner/program/build_config.h"

#if GEOLOCO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

struct Proc {
  int code = -1;  // -1: killed at the deadline or by a signal
  std::string output;
};

// Runs geoloco-train with `args`, stdout and stderr into one string; killed after 30 s.
Proc run_train(const std::vector<std::string>& args, const std::string& program = GEOLOCO_TRAIN_BIN) {
  static int n = 0;
  const std::string out_path = (std::filesystem::temp_directory_path() /
                                ("geoloco-train-backend-" + std::to_string(::getpid()) + "-" + std::to_string(n++)))
                                   .string();
  std::vector<std::string> argv_s{program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fd);
  Proc p;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      p.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);  // the child this test started
      ::waitpid(pid, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream f(out_path);
  std::stringstream ss;
  ss << f.rdbuf();
  p.output = ss.str();
  std::filesystem::remove(out_path);
  return p;
}

}  // namespace

TEST_CASE("geoloco-train --backend cuda is refused with exit 2 where it cannot run", "[train][backend]") {
  std::string expected;
#if GEOLOCO_HAVE_CUDA
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e == cudaSuccess && devices > 0) {
    WARN("SKIPPED: a CUDA device is present (" << devices
                                               << "), so --backend cuda is not refused here; scripts/gpu-check.sh "
                                                  "trains with it instead");
    return;
  }
  expected = e != cudaSuccess
                 ? std::string("geoloco-train: --backend cuda: no CUDA device: cudaGetDeviceCount returned ") +
                       cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")\n"
                 : "geoloco-train: --backend cuda: no CUDA device: cudaGetDeviceCount returned cudaSuccess "
                   "with a count of 0\n";
#else
  expected = "geoloco-train: --backend cuda: this geoloco-train was built without CUDA (no nvcc at build time)\n";
#endif
  // Alone, with workers (refused once, before any starts), and with a daemon
  // socket that does not exist (refused before connecting): the same line.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--backend", "cuda"},
        std::vector<std::string>{"--backend", "cuda", "--model", "gpt", "--steps", "5", "--workers", "2"},
        std::vector<std::string>{"--backend", "cuda", "--sync-socket", "/nonexistent/geoloco.sock", "--job", "j",
                                 "--sync-every", "5"}}) {
    const Proc p = run_train(args);
    INFO("args: " << args.size() << " words, output: " << p.output);
    CHECK(p.code == 2);
    CHECK(p.output == expected);
  }
}

#if GEOLOCO_HAVE_CUDA
TEST_CASE("geoloco-train without geoloco-train-cuda beside it refuses --backend cuda with exit 2", "[train][backend]") {
  // geoloco-train carries the CPU backend only and runs its CUDA sibling
  // from its own folder for --backend cuda: a copy alone in another folder
  // says which program it could not run.
  const auto dir = std::filesystem::temp_directory_path() / ("geoloco-train-alone-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto alone = dir / "geoloco-train";
  std::filesystem::copy_file(GEOLOCO_TRAIN_BIN, alone, std::filesystem::copy_options::overwrite_existing);
  const Proc p = run_train({"--backend", "cuda"}, alone.string());
  const Proc help = run_train({"--help"}, alone.string());  // the program itself runs alone
  std::filesystem::remove_all(dir);
  INFO(p.output);
  CHECK(p.code == 2);
  CHECK(p.output == "geoloco-train: --backend cuda: the CUDA trainer " + (dir / "geoloco-train-cuda").string() +
                        " cannot be run (No such file or directory); it is built beside geoloco-train when CUDA is\n");
  CHECK(help.code == 0);
}
#endif

TEST_CASE("geoloco-train --backend accepts only cpu and cuda", "[train][backend]") {
  const Proc p = run_train({"--backend", "tpu"});
  INFO(p.output);
  CHECK(p.code != 0);
  CHECK(p.code != 2);  // 2 means "cuda cannot run here", not a typo
  CHECK(p.output.find("--backend: tpu not in {cpu,cuda}") != std::string::npos);
}
