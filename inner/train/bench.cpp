#include "inner/train/bench.h"

#include <chrono>
#include <cstdio>
#include <ostream>

#include "inner/collective/collective.h"
#include "inner/cpu/blas.h"
#include "inner/train/trainer.h"

namespace geoloco::inner {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

BenchOptions::BenchOptions() {
  mlp.model = "mlp";
  mlp.batch = 256;
  gpt.model = "gpt";
  gpt.batch = 16;
  gpt.gpt = GptOptions{256, 128, 128, 4, 4};
  gpt.data.eval_limit = 64;
  mlp.data.eval_limit = 1000;
}

Status BenchOptions::validate() const {
  GEOLOCO_RETURN_IF(!(seconds_per_model > 0.0) || !(peak_seconds > 0.0), Err::invalid_argument,
                    "bench: seconds must be > 0");
  GEOLOCO_RETURN_IF(threads < 1, Err::invalid_argument, "bench: threads must be >= 1");
  GEOLOCO_TRY(mlp.validate());
  return gpt.validate();
}

double measure_sgemm_gflops(const GemmShape& s, double seconds) {
  std::vector<float> a(s.m * s.k, 0.5f), b(s.k * s.n, 0.25f), c(s.m * s.n, 0.0f);
  const auto run = [&] {
    cpu::gemm(false, false, static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, a.data(),
              static_cast<int>(s.k), b.data(), static_cast<int>(s.n), 0.0f, c.data(), static_cast<int>(s.n));
  };
  run();  // warm caches and OpenBLAS's buffers
  std::uint64_t reps = 0;
  const auto start = Clock::now();
  do {
    run();
    ++reps;
  } while (since(start) < seconds);
  return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n) *
         static_cast<double>(reps) / since(start) / 1e9;
}

Result<std::vector<BenchResult>> run_bench(const BenchOptions& options, std::ostream& out) {
  GEOLOCO_TRY(options.validate());
  cpu::set_blas_threads(options.threads);
  out << "geoloco-train --bench: CPU backend, " << options.threads << " OpenBLAS thread(s)\n";
  std::vector<BenchResult> results;
  for (const TrainOptions* o : {&options.mlp, &options.gpt}) {
    auto data = load_dataset(*o);
    if (!data.ok()) return data.status();
    SingleCollective single;
    auto trainer = Trainer::create(*o, single, *data);
    if (!trainer.ok()) return trainer.status();
    Trainer& t = **trainer;
    for (int i = 0; i < 2; ++i) {  // warm-up: activations allocated, caches filled
      auto s = t.step();
      if (!s.ok()) return s.status();
    }
    BenchResult r;
    r.model = o->model;
    r.unit = t.model().work_unit_name();
    r.params = t.layout().total();
    r.batch = o->batch;
    std::uint64_t units = 0;
    const auto start = Clock::now();
    do {
      auto s = t.step();
      if (!s.ok()) return s.status();
      units += s->work_units;
      r.final_loss = s->loss;
      ++r.steps;
    } while (since(start) < options.seconds_per_model);
    const double seconds = since(start);
    r.units_per_second = static_cast<double>(units) / seconds;
    r.gflops = t.model().train_flops(o->batch) * static_cast<double>(r.steps) / seconds / 1e9;
    r.peak_shape = t.model().largest_gemm(o->batch);
    r.peak_gflops = measure_sgemm_gflops(r.peak_shape, options.peak_seconds);
    char line[512];
    std::snprintf(line, sizeof line,
                  "%-4s %9zu params  batch %4zu  %10.0f %s/s  %7.2f GFLOP/s  | sgemm %zux%zux%zu peak %7.2f GFLOP/s  "
                  "ratio %.2f  (%llu steps, loss %.3f)\n",
                  r.model.c_str(), r.params, r.batch, r.units_per_second, r.unit.c_str(), r.gflops, r.peak_shape.m,
                  r.peak_shape.k, r.peak_shape.n, r.peak_gflops, r.gflops / r.peak_gflops,
                  static_cast<unsigned long long>(r.steps), r.final_loss);
    out << line << std::flush;
    results.push_back(r);
  }
  return results;
}

}  // namespace geoloco::inner
