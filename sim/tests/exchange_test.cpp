// The simulator's in-memory exchange against geolocod's all-reduce over
// loopback TLS: with a lossy chain, stochastic rounding and error feedback,
// Δ given as anchor − replica, several chunks per shard and a fragment's
// offset into the model, the averaged Δ, every residual and every site's
// bytes are the same, bit for bit and byte for byte.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>

#include "common/digest.h"
#include "sim/exchange.h"
#include "transport/allreduce.h"
#include "transport/loopback.h"

using namespace geoloco;
using namespace std::chrono_literals;

namespace {

float replica_value(std::size_t s, std::size_t i) { return 0.013f * static_cast<float>((i * 31 + s * 7) % 97) - 0.6f; }
float anchor_value(std::size_t i) { return 0.01f * static_cast<float>(i % 13); }

}  // namespace

TEST_CASE("the simulator's exchange computes what the transport's all-reduce computes, bit for bit") {
  const std::vector<std::string> names{"a", "b", "c"};
  auto federation = transport::loopback::Federation::create(names);
  REQUIRE(federation.ok());
  auto options = transport::loopback::test_options();  // 4096-value chunks
  auto made = transport::loopback::make_sites(**federation, names, options);
  REQUIRE(made.ok());
  auto& sites = *made;

  const std::size_t model = 30000, offset = 1000, n = 25000;  // a fragment [1000, 26000) of the model
  compression::PipelineSpec q8{
      {compression::QuantizeSpec{8, 128, compression::Rounding::stochastic}, compression::ZstdSpec{3}}};
  const std::vector<double> weights{640, 1280, 960};
  std::vector<std::vector<float>> replicas(3, std::vector<float>(n));
  std::vector<float> anchor(n);
  for (std::size_t i = 0; i < n; ++i) anchor[i] = anchor_value(i);
  for (std::size_t s = 0; s < 3; ++s)
    for (std::size_t i = 0; i < n; ++i) replicas[s][i] = replica_value(s, i);
  // Both sides start from the same nonzero residuals, as after earlier rounds.
  auto residual = [&](std::size_t s) {
    std::vector<float> e(model);
    for (std::size_t i = 0; i < model; ++i) e[i] = 1e-3f * static_cast<float>((i + s) % 5) - 2e-3f;
    return e;
  };
  std::vector<compression::ErrorFeedback> wire_fb, sim_fb;
  for (std::size_t s = 0; s < 3; ++s) {
    wire_fb.emplace_back(residual(s));
    sim_fb.emplace_back(residual(s));
  }

  // Over the wire, as geolocod runs it (encoded output, the residual updated as each chunk is encoded).
  std::vector<transport::EncodedOutput> encoded(3);
  std::vector<transport::AllReduceRequest> requests(3);
  std::vector<std::future<Result<transport::AllReduceStats>>> futures;
  for (std::size_t s = 0; s < 3; ++s) {
    auto& r = requests[s];
    r.key = {7, 2};
    r.participants = names;
    r.weights = weights;
    r.pipeline = q8;
    r.input = replicas[s];
    r.input_base = anchor;
    encoded[s].values = n;
    r.encoded_output = &encoded[s];
    r.feedback = &wire_fb[s];
    r.feedback_offset = offset;
    r.seed = 11;
    r.timeout = 60s;
    transport::Mesh& mesh = sites[s]->mesh();
    futures.push_back(sites[s]->spawn([&mesh, req = r]() { return transport::all_reduce(mesh, req); }));
  }
  std::vector<transport::AllReduceStats> stats;
  for (auto& f : futures) {
    auto res = f.get();
    REQUIRE(res.ok());
    stats.push_back(*res);
  }
  std::vector<std::vector<float>> wire_delta(3, std::vector<float>(n));
  for (std::size_t s = 0; s < 3; ++s) {
    REQUIRE(encoded[s]
                .for_each([&](std::uint64_t begin, std::span<const float> v) {
                  std::copy(v.begin(), v.end(), wire_delta[s].begin() + static_cast<long>(begin));
                  return Status();
                })
                .ok());
  }

  // In memory.
  sim::ExchangeSpec spec;
  spec.round = 7;
  spec.attempt = 2;
  spec.seed = 11;
  spec.chunk_elements = options.chunk_elements;
  spec.feedback_offset = offset;
  spec.pipeline = q8;
  spec.weights = weights;
  std::vector<sim::ExchangeInput> inputs;
  for (std::size_t s = 0; s < 3; ++s) inputs.push_back({replicas[s], anchor, &sim_fb[s]});
  auto ex = sim::run_exchange(spec, inputs);
  REQUIRE(ex.ok());

  for (std::size_t s = 0; s < 3; ++s) {
    INFO("site " << names[s]);
    CHECK(digest_f32(ex->delta) == digest_f32(wire_delta[s]));
    CHECK(std::memcmp(ex->delta.data(), wire_delta[s].data(), n * sizeof(float)) == 0);
    CHECK(digest_f32(sim_fb[s].residual()) == digest_f32(wire_fb[s].residual()));
    CHECK(ex->bytes_sent[s] == stats[s].bytes_sent);
  }
  // Lossy but close: the average of the three Δs within the codec's error.
  double err = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double want = 0, total = 640 + 1280 + 960;
    for (std::size_t s = 0; s < 3; ++s)
      want += weights[s] / total * (static_cast<double>(anchor[i]) - static_cast<double>(replicas[s][i]));
    err = std::max(err, std::abs(want - static_cast<double>(ex->delta[i])));
  }
  CHECK(err < 0.02);
  CHECK(ex->raw_bytes == 3 * n * sizeof(float));
  CHECK(ex->payload_bytes < ex->raw_bytes / 2);
}
