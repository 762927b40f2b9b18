#include "bench/gloo_baseline.h"

#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

namespace geoloco::bench {

Result<double> gloo_allreduce_seconds(int ranks, std::size_t count, int repeats) {
  gloo::rendezvous::HashStore store;
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto device = gloo::transport::tcp::CreateDevice(attr);
  std::vector<double> best(ranks, std::numeric_limits<double>::infinity());
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto context = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
        context->connectFullMesh(store, device);
        std::vector<float> data(count, static_cast<float>(rank + 1));
        std::vector<float*> pointers{data.data()};
        gloo::AllreduceRing<float> algorithm(context, pointers, static_cast<int>(count));
        algorithm.run();  // warm-up
        for (int r = 0; r < repeats; ++r) {
          // Gloo has no barrier helper here; a tiny all-reduce lines the ranks up.
          std::vector<float> one(1, 0.0f);
          std::vector<float*> one_ptr{one.data()};
          gloo::AllreduceRing<float>(context, one_ptr, 1).run();
          const auto start = std::chrono::steady_clock::now();
          algorithm.run();
          best[rank] = std::min(best[rank],
                                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < ranks; ++rank)
    GEOLOCO_RETURN_IF(!errors[rank].empty(), Err::internal, "gloo rank ", rank, ": ", errors[rank]);
  return *std::max_element(best.begin(), best.end());
}

}  // namespace geoloco::bench
