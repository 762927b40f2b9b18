// Writes the small checkpoint that python/tests/test_checkpoint.py reads and
// checks value by value. usage: write_checkpoint PATH
#include <cstdio>

#include "outer/checkpoint.h"

int main(int argc, char** argv) {
  using namespace geoloco::outer;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PATH\n", argv[0]);
    return 2;
  }
  OuterState s;
  s.job = "python-test";
  s.round = 17;
  s.layout = {{"embed", {3, 4}, 0}, {"head", {5}, 12}, {"bias", {}, 17}};
  for (int i = 0; i < 18; ++i) {
    const float x = static_cast<float>(i);
    s.anchor.push_back(0.5f * x - 3.0f);  // the script recomputes these in fp32
    s.momentum.push_back(0.25f * x);
  }
  s.residual("dc-west").assign(18, -2.0f);
  s.residual("dc-east").assign(18, 0.125f);
  const geoloco::Status st = save_checkpoint(argv[1], s, "cfg-abc");
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
