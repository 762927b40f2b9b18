// The name a thread shows in `top -H`, `ps -L`, `perf` and gdb: the
// daemon's connection threads and its checkpoint writer are told apart from
// its event loop there (Linux keeps 15 characters of it).
#pragma once

#include <pthread.h>

#include <string>
#include <string_view>

namespace geoloco {

inline void name_this_thread(std::string_view name) {
  const std::string kept(name.substr(0, 15));
  (void)pthread_setname_np(pthread_self(), kept.c_str());  // a name is a help, never a failure
}

}  // namespace geoloco
