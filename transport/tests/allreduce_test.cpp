// N sites as threads over real loopback TLS (N = 2, 3, 5): the all-reduce of
// inputs with a closed-form answer is exact with lossless codecs, within the
// codec's bound with lossy ones, and bit-identical on every site.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <thread>

#include "common/digest.h"
#include "transport/allreduce.h"
#include "transport/loopback.h"

using namespace geoloco;
using namespace geoloco::transport;
using namespace std::chrono_literals;

namespace {

// Certificates and connected sites; the sites go first when it is destroyed.
struct Federated {
  std::unique_ptr<loopback::Federation> federation;
  std::vector<std::unique_ptr<loopback::Site>> sites;
};

Federated federate(const std::vector<std::string>& names, const TransportOptions& options) {
  auto federation = loopback::Federation::create(names);
  REQUIRE(federation.ok());
  auto sites = loopback::make_sites(**federation, names, options);
  REQUIRE(sites.ok());
  return {std::move(*federation), std::move(*sites)};
}

std::vector<std::string> names_for(int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(std::string(1, static_cast<char>('a' + i)));
  return names;
}

// Site s's input: quarter-integers, exact in fp32 and in every lossless codec.
float input_value(std::size_t s, std::size_t i) {
  return 0.25f * static_cast<float>(static_cast<int>((i * 7 + s * 3) % 19) - 9);
}

struct Outcome {
  std::vector<Result<AllReduceStats>> results;
  std::vector<std::vector<float>> outputs;
  std::vector<EncodedOutput> encoded;  // encoded output only (also decoded into `outputs`)
};

Outcome run_all(std::vector<std::unique_ptr<loopback::Site>>& sites, std::uint64_t round, std::size_t n,
                const compression::PipelineSpec& pipeline, std::vector<compression::ErrorFeedback>* feedback = nullptr,
                std::uint64_t feedback_offset = 0, bool as_difference = false, bool encoded = false) {
  const std::size_t parts = sites.size();
  std::vector<std::string> names;
  std::vector<double> weights;
  for (std::size_t s = 0; s < parts; ++s) {
    names.push_back(sites[s]->name());
    weights.push_back(static_cast<double>(s + 1));
  }
  std::vector<std::vector<float>> inputs(parts, std::vector<float>(n));
  Outcome out;
  out.outputs.assign(parts, std::vector<float>(n, -1.0f));
  out.encoded.resize(encoded ? parts : 0);
  for (std::size_t s = 0; s < parts; ++s)
    for (std::size_t i = 0; i < n; ++i) inputs[s][i] = input_value(s, i);
  // as_difference: the same contributions given as base − input (exact in fp32).
  std::vector<std::vector<float>> bases(parts, std::vector<float>(n)), ones(parts, std::vector<float>(n, 1.0f));
  for (std::size_t s = 0; s < parts; ++s)
    for (std::size_t i = 0; i < n; ++i) bases[s][i] = inputs[s][i] + 1.0f;
  std::vector<std::future<Result<AllReduceStats>>> futures;
  std::vector<AllReduceRequest> requests(parts);
  for (std::size_t s = 0; s < parts; ++s) {
    AllReduceRequest& r = requests[s];
    r.key = {round, 0};
    r.participants = names;
    r.weights = weights;
    r.pipeline = pipeline;
    r.input = as_difference ? ones[s] : inputs[s];
    if (as_difference) r.input_base = bases[s];
    if (encoded) {
      out.encoded[s].values = n;
      r.encoded_output = &out.encoded[s];
    } else {
      r.output = out.outputs[s];
    }
    r.feedback = feedback ? &(*feedback)[s] : nullptr;
    r.feedback_offset = feedback_offset;
    r.seed = 99;
    r.timeout = 60s;
    Mesh& mesh = sites[s]->mesh();
    futures.push_back(sites[s]->spawn([&mesh, r]() { return all_reduce(mesh, r); }));
  }
  for (auto& f : futures) out.results.push_back(f.get());
  for (std::size_t s = 0; s < out.encoded.size(); ++s) {
    if (!out.results[s].ok()) continue;
    Status decoded = out.encoded[s].for_each([&](std::uint64_t begin, std::span<const float> values) {
      std::copy(values.begin(), values.end(), out.outputs[s].begin() + static_cast<long>(begin));
      return Status();
    });
    if (!decoded.ok()) out.results[s] = decoded;
  }
  return out;
}

// The documented arithmetic: weights normalized in double, cast to fp32,
// summed in participant order without contraction.
std::vector<float> reference(std::size_t parts, std::size_t n) {
  double total = 0;
  for (std::size_t s = 0; s < parts; ++s) total += s + 1.0;
  std::vector<float> ref(n, 0.0f);
  for (std::size_t s = 0; s < parts; ++s) {
    const float w = static_cast<float>((s + 1.0) / total);
    for (std::size_t i = 0; i < n; ++i) ref[i] = ref[i] + w * input_value(s, i);
  }
  return ref;
}

}  // namespace

TEST_CASE("two-phase all-reduce over loopback TLS: exact, bounded, identical everywhere") {
  const int n_sites = GENERATE(2, 3, 5);
  INFO(n_sites << " sites");
  auto names = names_for(n_sites);
  auto federated = federate(names, loopback::test_options());
  auto& sites = federated.sites;
  const std::size_t n = 50000;  // several 4096-value chunks per shard, uneven shards
  const auto ref = reference(sites.size(), n);

  SECTION("lossless chains give exactly the weighted average") {
    std::uint64_t round = 1;
    for (auto pipeline : {compression::PipelineSpec{}, compression::PipelineSpec{{compression::ZstdSpec{1}}}}) {
      INFO(compression::describe(pipeline));
      auto out = run_all(sites, round++, n, pipeline);
      for (std::size_t s = 0; s < sites.size(); ++s) {
        REQUIRE(out.results[s].ok());
        CHECK(out.outputs[s] == ref);
        // Closed form: sum_s (s+1) x_s / sum_s (s+1), within fp32 rounding.
        for (std::size_t i = 0; i < n; i += 997) {
          double exact = 0, total = 0;
          for (int t = 0; t < n_sites; ++t) {
            exact += (t + 1.0) * input_value(t, i);
            total += t + 1.0;
          }
          REQUIRE(std::fabs(out.outputs[s][i] - exact / total) <= 1e-5);
        }
      }
      // Each site sent its share: 2 (N-1)/N of the raw tensor, plus headers.
      const double raw = n * 4.0;
      const double expected_sent = 2.0 * (n_sites - 1) / n_sites * raw;
      for (std::size_t s = 0; s < sites.size(); ++s) {
        const auto sent = double(out.results[s]->bytes_sent);
        if (pipeline.stages.empty()) {
          CHECK(sent >= 0.9 * expected_sent);
          CHECK(sent <= 1.1 * expected_sent + 4096);
        }
      }
    }
    // Contributions given as base − input, made chunk by chunk: the same result.
    auto diff = run_all(sites, round++, n, compression::PipelineSpec{}, nullptr, 0, /*as_difference=*/true);
    for (std::size_t s = 0; s < sites.size(); ++s) {
      REQUIRE(diff.results[s].ok());
      CHECK(diff.outputs[s] == ref);
    }
  }

  SECTION("a lossy chain stays within its bound and is bit-identical on every site") {
    compression::PipelineSpec q8{{compression::QuantizeSpec{8, 128, compression::Rounding::stochastic}}};
    std::vector<compression::ErrorFeedback> feedback;
    for (int s = 0; s < n_sites; ++s) feedback.emplace_back(n);
    auto out = run_all(sites, 7, n, q8, &feedback);
    for (std::size_t s = 0; s < sites.size(); ++s) REQUIRE(out.results[s].ok());
    for (std::size_t s = 1; s < sites.size(); ++s) CHECK(digest_f32(out.outputs[s]) == digest_f32(out.outputs[0]));
    // Two quantizations (contribution, then average), each within one step
    // of 2.25 / 127 (stochastic rounding), so within 2 steps overall.
    const float step = 2.25f / 127;
    for (std::size_t i = 0; i < n; ++i) REQUIRE(std::fabs(out.outputs[0][i] - ref[i]) <= 2 * step * 1.001f);
    // Error feedback kept what the first quantization dropped.
    CHECK(feedback[0].residual_norm() > 0);

    // A Streaming DiLoCo fragment: the input is values [1000, 1000 + n) of a
    // larger model. Only that range of the residual changes, and the result
    // is as good and as identical as before.
    std::vector<compression::ErrorFeedback> wide;
    for (int s = 0; s < n_sites; ++s) wide.emplace_back(n + 1500);
    auto at_offset = run_all(sites, 9, n, q8, &wide, 1000);
    for (std::size_t s = 0; s < sites.size(); ++s) {
      REQUIRE(at_offset.results[s].ok());
      CHECK(digest_f32(at_offset.outputs[s]) == digest_f32(at_offset.outputs[0]));
      const auto r = wide[s].residual();
      CHECK(std::all_of(r.begin(), r.begin() + 1000, [](float v) { return v == 0.0f; }));
      CHECK(std::all_of(r.end() - 500, r.end(), [](float v) { return v == 0.0f; }));
      CHECK(std::count(r.begin() + 1000, r.end() - 500, 0.0f) < static_cast<long>(n / 2));
    }
    for (std::size_t i = 0; i < n; ++i) REQUIRE(std::fabs(at_offset.outputs[0][i] - ref[i]) <= 2 * step * 1.001f);
    // Error feedback as geolocod runs it: the same round on a second
    // federation gives the same bytes, result and residual, bit for bit; each
    // value of a contribution is encoded once, each averaged value decoded
    // once on arrival.
    auto other = federate(names, loopback::test_options());
    std::vector<compression::ErrorFeedback> plain_fb, again_fb;
    for (int s = 0; s < n_sites; ++s) {
      plain_fb.emplace_back(n);
      again_fb.emplace_back(n);
    }
    auto plain = run_all(other.sites, 11, n, q8, &plain_fb);
    auto again = run_all(sites, 11, n, q8, &again_fb);
    for (std::size_t s = 0; s < sites.size(); ++s) {
      REQUIRE(plain.results[s].ok());
      REQUIRE(again.results[s].ok());
      CHECK(again.outputs[s] == plain.outputs[s]);
      CHECK(again.results[s]->values_encoded == n);
      CHECK(again.results[s]->gathered_values_decoded == n);
      CHECK(again.results[s]->encode_cpu_seconds > 0);
      CHECK(again.results[s]->cpu_seconds >= again.results[s]->encode_cpu_seconds);
      const auto a = again_fb[s].residual(), b = plain_fb[s].residual();
      CHECK(std::equal(a.begin(), a.end(), b.begin()));
      CHECK(plain_fb[s].residual_norm() > 0);
    }

    // Encoded output (geolocod's averaged Δ until COMMITTED): the chunks cover
    // the tensor in order, take about a quarter of the values' bytes with q8,
    // and decode to exactly a plain run's output of the same round.
    auto plain12 = run_all(other.sites, 12, n, q8);
    auto encoded12 = run_all(sites, 12, n, q8, nullptr, 0, false, /*encoded=*/true);
    for (std::size_t s = 0; s < sites.size(); ++s) {
      REQUIRE(plain12.results[s].ok());
      REQUIRE(encoded12.results[s].ok());
      CHECK(encoded12.outputs[s] == plain12.outputs[s]);
      const auto& e = encoded12.encoded[s];
      REQUIRE(e.ranges.size() == e.chunks.size());
      std::uint64_t next = 0;
      for (const auto& r : e.ranges) {
        CHECK(r.begin == next);
        next = r.begin + r.size;
      }
      CHECK(next == n);
      CHECK(e.bytes() < n * sizeof(float) / 3);
      // run_all() decoded it once; on arrival only the headers were checked.
      // clear() forgets the count.
      CHECK(e.values_decoded == n);
      CHECK(encoded12.results[s]->gathered_values_decoded == 0);
      REQUIRE(e.sources.size() == e.chunks.size());
      CHECK(e.sources.front() == names.front());
      CHECK(e.sources.back() == names.back());
      auto copy = e;
      copy.clear();
      CHECK(copy.values_decoded == 0);
      // A chunk that does not decode (cut short): the first pass over the
      // chunks refuses it, naming the site that averaged it.
      auto damaged = e;
      damaged.chunks.back().pop_back();
      const Status refused = damaged.for_each([](std::uint64_t, std::span<const float>) { return Status(); });
      CHECK_FALSE(refused.ok());
      CHECK_THAT(refused.message(),
                 Catch::Contains(cat("chunk ", e.chunks.size() - 1, " (averaged by ", names.back(), ")")));
    }

    std::vector<compression::ErrorFeedback> narrow;
    for (int s = 0; s < n_sites; ++s) narrow.emplace_back(n + 10);
    auto refused = run_all(sites, 10, n, q8, &narrow, 11);
    CHECK(refused.results[0].status().code() == Err::invalid_argument);
    CHECK_THAT(refused.results[0].status().message(), Catch::Contains("at offset 11"));
  }
}

TEST_CASE("an all-reduce refuses a request it cannot run, naming the rule") {
  auto names = names_for(2);
  auto federated = federate(names, loopback::test_options());
  auto& sites = federated.sites;
  std::vector<float> in(10), out(9);
  AllReduceRequest r;
  r.key = {1, 0};
  r.participants = {"a", "b"};
  r.weights = {1, 1};
  r.input = in;
  r.output = out;
  Mesh& mesh = sites[0]->mesh();
  auto res = sites[0]->spawn([&mesh, r]() { return all_reduce(mesh, r); }).get();
  REQUIRE_FALSE(res.ok());
  CHECK(res.status().message() == "all-reduce: input has 10 values, output 9");
  EncodedOutput encoded;
  r.encoded_output = &encoded;
  res = sites[0]->spawn([&mesh, r]() { return all_reduce(mesh, r); }).get();
  CHECK(res.status().message() == "all-reduce: give output or encoded_output, not both");
  r.encoded_output = nullptr;
  r.output = std::span<float>(in);
  r.participants = {"b", "c"};
  res = sites[0]->spawn([&mesh, r]() { return all_reduce(mesh, r); }).get();
  CHECK(res.status().message().find("this site (a) is not among the participants") != std::string::npos);
  r.participants = {"a", "b"};
  r.weights = {1, -2};
  res = sites[0]->spawn([&mesh, r]() { return all_reduce(mesh, r); }).get();
  CHECK(res.status().message().find("weight of 'b' must be finite and > 0") != std::string::npos);
}

TEST_CASE("a peer that disappears mid-transfer is detected within the read timeout, named in the error") {
  auto names = names_for(3);
  auto options = loopback::test_options();
  options.rate_limit_mbit = 40;  // slow enough that the transfer is under way when c vanishes
  auto federated = federate(names, options);
  auto& sites = federated.sites;
  const std::size_t n = 400000;  // 1.6 MB per site: ~0.3 s of traffic per phase at 40 Mbit/s
  std::vector<std::vector<float>> inputs(3, std::vector<float>(n, 1.0f)), outputs(3, std::vector<float>(n));
  std::vector<std::future<Result<AllReduceStats>>> futures;
  for (int s = 0; s < 2; ++s) {  // c never runs its part: it freezes instead
    AllReduceRequest r;
    r.key = {1, 0};
    r.participants = names;
    r.weights = {1, 1, 1};
    r.input = inputs[s];
    r.output = outputs[s];
    Mesh& mesh = sites[s]->mesh();
    futures.push_back(sites[s]->spawn([&mesh, r]() { return all_reduce(mesh, r); }));
  }
  std::this_thread::sleep_for(150ms);
  const auto frozen_at = std::chrono::steady_clock::now();
  sites[2]->freeze();
  for (auto& f : futures) {
    auto res = f.get();
    const auto detected_after = std::chrono::steady_clock::now() - frozen_at;
    REQUIRE_FALSE(res.ok());
    INFO(res.status().message());
    CHECK(res.status().message().find("peer c") == 0);
    CHECK(detected_after < std::chrono::milliseconds(options.read_timeout_ms + 1500));
  }
}

TEST_CASE("dropped connections are dialed again with backoff and the next all-reduce succeeds") {
  auto names = names_for(2);
  auto federated = federate(names, loopback::test_options());
  auto& sites = federated.sites;
  // Cut every connection between a and b, from b's side.
  auto slots = [&](int s, const std::string& peer) {
    return sites[s]->call([&] {
      std::vector<std::shared_ptr<Connection>> v;
      for (int k = 0; k < 2; ++k) v.push_back(sites[s]->mesh().connection(peer, k));
      return v;
    });
  };
  const auto old_a = slots(0, "b"), old_b = slots(1, "a");
  sites[1]->call([&] {
    for (auto& c : old_b)
      if (c) c->close(GEOLOCO_ERROR(Err::io, "cut by the test"));
    return 0;
  });
  // Both sides must hold new connections (a notices the cut only when it reads).
  bool replaced = false;
  for (int tries = 0; tries < 500 && !replaced; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto now_a = slots(0, "b"), now_b = slots(1, "a");
    replaced = true;
    for (int k = 0; k < 2; ++k)
      replaced = replaced && now_a[k] && now_a[k] != old_a[k] && now_b[k] && now_b[k] != old_b[k];
  }
  REQUIRE(replaced);
  auto out = run_all(sites, 1, 10000, compression::PipelineSpec{});
  for (auto& r : out.results) CHECK(r.ok());
  CHECK(out.outputs[0] == reference(2, 10000));
}

TEST_CASE("observers receive the same average without contributing, and losing one does not stop the others") {
  auto names = names_for(4);
  auto federated = federate(names, loopback::test_options());
  auto& sites = federated.sites;
  const std::size_t n = 20000;
  std::vector<std::vector<float>> in(4, std::vector<float>(n)), out(4, std::vector<float>(n, -7.0f));
  for (int s = 0; s < 3; ++s)
    for (std::size_t i = 0; i < n; ++i) in[s][i] = input_value(s, i);
  std::vector<std::future<Result<AllReduceStats>>> futures;
  for (int s = 0; s < 4; ++s) {
    AllReduceRequest r;
    r.key = {1, 0};
    r.participants = {"a", "b", "c"};
    r.weights = {1, 2, 3};
    r.observers = {"d"};
    if (s < 3) r.input = in[s];  // d contributes nothing
    r.output = out[s];
    r.timeout = 60s;
    Mesh& mesh = sites[s]->mesh();
    futures.push_back(sites[s]->spawn([&mesh, r]() { return all_reduce(mesh, r); }));
  }
  for (const auto& r : loopback::wait_all(futures)) REQUIRE(r.ok());
  const auto ref = reference(3, n);
  for (int s = 0; s < 4; ++s) CHECK(out[s] == ref);

  // Round 2: d vanishes before it starts; a, b and c still complete.
  sites[3]->freeze();
  std::vector<std::future<Result<AllReduceStats>>> round2;
  for (int s = 0; s < 3; ++s) {
    AllReduceRequest r;
    r.key = {2, 0};
    r.participants = {"a", "b", "c"};
    r.weights = {1, 2, 3};
    r.observers = {"d"};
    r.input = in[s];
    r.output = out[s];
    r.timeout = 60s;
    Mesh& mesh = sites[s]->mesh();
    round2.push_back(sites[s]->spawn([&mesh, r]() { return all_reduce(mesh, r); }));
  }
  for (auto& f : round2) {
    auto res = f.get();
    INFO(res.status().message());
    CHECK(res.ok());
  }
}

TEST_CASE("after set_job, a new job's first round works although an old job reached a later round") {
  // Regression: the mesh kept the old job's operation (round 7) as current,
  // so the new job's round-1 frames from a peer that began first were
  // refused as stale, and every retry with them.
  auto federated = federate(names_for(2), loopback::test_options());
  auto& sites = federated.sites;
  auto old_job = run_all(sites, 7, 5000, {});
  for (auto& r : old_job.results) REQUIRE(r.ok());
  for (auto& s : sites)
    s->call([&s] {
      s->mesh().set_job(2);
      return 0;
    });
  const std::size_t n = 5000;
  std::vector<std::vector<float>> inputs(2, std::vector<float>(n, 1.0f)), outputs(2, std::vector<float>(n, 0.0f));
  auto request = [&](std::size_t s) {
    AllReduceRequest r;
    r.key = {1, 0};
    r.participants = {"a", "b"};
    r.weights = {1, 1};
    r.input = inputs[s];
    r.output = outputs[s];
    r.timeout = 20s;
    return r;
  };
  Mesh& mb = sites[1]->mesh();
  auto fb = sites[1]->spawn([&mb, r = request(1)]() { return all_reduce(mb, r); });
  std::this_thread::sleep_for(300ms);  // b's frames reach a before a begins round 1
  Mesh& ma = sites[0]->mesh();
  auto fa = sites[0]->spawn([&ma, r = request(0)]() { return all_reduce(ma, r); });
  auto ra = fa.get();
  auto rb = fb.get();
  INFO((ra.ok() ? std::string() : ra.status().message()) << " / " << (rb.ok() ? std::string() : rb.status().message()));
  REQUIRE(ra.ok());
  REQUIRE(rb.ok());
  CHECK(outputs[0] == inputs[0]);
  CHECK(outputs[1] == inputs[1]);
}
