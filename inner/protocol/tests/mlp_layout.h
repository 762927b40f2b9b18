// The small mlp layout (43 values, 4 tensors) the protocol tests share.
#pragma once

#include "inner/protocol/message.h"

namespace geoloco::inner::protocol::testing {

inline Layout mlp() {
  return {{"fc1.weight", {4, 6}, 0}, {"fc1.bias", {4}, 24}, {"fc2.weight", {3, 4}, 28}, {"fc2.bias", {3}, 40}};
}

}  // namespace geoloco::inner::protocol::testing
