// The emulator's fibers: a saved stack pointer per fiber, and a switch that
// saves the callee-saved registers on the old stack and restores them from
// the new one. No system call per switch, as swapcontext makes (it saves the signal mask), which matters here: every
// emulated thread of every block is a fiber, millions per test run.
// x86-64 System V only; elsewhere the build falls back to ucontext.
//
// Under AddressSanitizer each switch is announced to it
// (__sanitizer_start/finish_switch_fiber), so the sanitizer build runs the
// emulated kernels with their out-of-bounds accesses checked.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define GEOLOCO_EMULATOR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GEOLOCO_EMULATOR_ASAN 1
#endif
#endif

#if defined(__x86_64__)
#define GEOLOCO_EMULATOR_FAST_FIBERS 1
#else
#include <ucontext.h>
#endif

namespace geoloco::cuda_emulator {

class Fiber {
 public:
  using Entry = void (*)();

  /// Makes the fiber start `entry` (which must never return) on the stack
  /// [stack, stack + bytes) at its next resume.
  void prepare(char* stack, std::size_t bytes, Entry entry);
  /// Suspends `from` (the running context) and runs this fiber.
  void resume_from(Fiber& from);
  /// Leaves `from` for good (it is never resumed) and runs this fiber.
  void finish_from(Fiber& from);
  /// The first thing a fiber's entry does: ends the switch into it.
  static void started(Fiber& from);

 private:
  void switch_from(Fiber& from, bool final);
  void arrived();

  const void* stack_bottom_ = nullptr;  // unknown (nullptr) for the thread's own stack until a fiber learns it
  std::size_t stack_bytes_ = 0;
  void* fake_stack_ = nullptr;  // AddressSanitizer's state for this fiber while it is suspended
#if defined(GEOLOCO_EMULATOR_FAST_FIBERS)
  void* sp_ = nullptr;
#else
  ucontext_t context_{};
#endif
};

}  // namespace geoloco::cuda_emulator
