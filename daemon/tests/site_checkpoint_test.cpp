// A site's checkpoint: saved without losing the held state or the residual,
// loaded back bit for bit, a damaged file set aside (never loaded), another
// configuration's refused.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "daemon/site_checkpoint.h"

using namespace geoloco;
using namespace geoloco::daemon;
namespace fs = std::filesystem;

namespace {
outer::OuterState state_of_round(std::uint64_t round) {
  outer::OuterState s;
  s.job = "ckpt";
  s.round = round;
  s.layout = {{"w", {3, 4}, 0}, {"b", {4}, 12}};
  for (int i = 0; i < 16; ++i) {
    s.anchor.push_back(0.25f * i + round);
    s.momentum.push_back(-0.5f * i);
  }
  return s;
}
}  // namespace

TEST_CASE("a site's checkpoint saves the held state and its residual, and loads them back as they were") {
  const fs::path dir = fs::temp_directory_path() / ("geoloco-site-ckpt-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path path = dir / "checkpoint.safetensors";

  auto none = load_site_checkpoint(path, "a", "cfg1", "ckpt");
  REQUIRE(none.ok());
  CHECK_FALSE(none->loaded);
  CHECK(none->set_aside.empty());

  outer::OuterState empty;  // no anchor yet: nothing is written
  REQUIRE(save_site_checkpoint(path, empty, nullptr, "a", "cfg1").ok());
  CHECK_FALSE(fs::exists(path));

  auto state = state_of_round(7);
  const auto held = state;
  std::vector<float> residual(16);
  for (int i = 0; i < 16; ++i) residual[i] = 0.125f * i;
  compression::ErrorFeedback feedback(residual);
  REQUIRE(save_site_checkpoint(path, state, &feedback, "a", "cfg1").ok());
  CHECK(state.anchor == held.anchor);  // read where they lie, unchanged
  CHECK(state.momentum == held.momentum);
  CHECK(std::vector<float>(feedback.residual().begin(), feedback.residual().end()) == residual);

  auto back = load_site_checkpoint(path, "a", "cfg1", "ckpt");
  REQUIRE(back.ok());
  REQUIRE(back->loaded);
  CHECK(back->loaded->state.round == 7);
  CHECK(back->loaded->state.anchor == held.anchor);
  CHECK(back->loaded->state.momentum == held.momentum);
  CHECK(back->loaded->state.layout == held.layout);
  REQUIRE(back->loaded->residual);
  CHECK(*back->loaded->residual == residual);
  auto other_site = load_site_checkpoint(path, "b", "cfg1", "ckpt");
  REQUIRE(other_site.ok());
  CHECK_FALSE(other_site->loaded->residual);  // only a's residual was saved

  auto changed = load_site_checkpoint(path, "a", "cfg2", "ckpt");
  CHECK(changed.status().code() == Err::invalid_argument);
  CHECK(changed.status().message() == "a checkpoint of another configuration of job 'ckpt' is at " + path.string() +
                                          ": remove that folder, or give the changed job another name");
  CHECK(fs::exists(path));  // refused, not set aside

  fs::resize_file(path, fs::file_size(path) - 10);  // torn
  auto torn = load_site_checkpoint(path, "a", "cfg1", "ckpt");
  REQUIRE(torn.ok());
  CHECK_FALSE(torn->loaded);
  CHECK(torn->set_aside.find(path.string() + " cannot be used (") == 0);
  CHECK(torn->set_aside.find("it is kept as " + path.string() + ".damaged") != std::string::npos);
  CHECK_FALSE(fs::exists(path));
  CHECK(fs::exists(dir / "checkpoint.safetensors.damaged"));
  fs::remove_all(dir);
}
