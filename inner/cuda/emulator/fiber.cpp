#include "inner/cuda/emulator/fiber.h"

#include <cstdint>
#include <cstring>

#if defined(GEOLOCO_EMULATOR_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(GEOLOCO_EMULATOR_FAST_FIBERS)
// geoloco_emulator_switch(void** save_sp, void* load_sp): pushes rbp, rbx
// and r12–r15, stores rsp in *save_sp, loads load_sp, and pops the same from
// there; `ret` continues the other fiber. The MXCSR and x87 control words
// are not switched (loading them stalls the pipeline): every fiber runs in
// the floating-point environment of the thread that launched the kernel,
// and kernels do not change it (CUDA has no way to).
asm(R"(
  .pushsection .text
  .p2align 4
  .globl geoloco_emulator_switch
  .hidden geoloco_emulator_switch
  .type geoloco_emulator_switch, @function
geoloco_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size geoloco_emulator_switch, .-geoloco_emulator_switch
  .popsection
)");
extern "C" void geoloco_emulator_switch(void** save_sp, void* load_sp);
#endif

namespace geoloco::cuda_emulator {

void Fiber::resume_from(Fiber& from) { switch_from(from, false); }
void Fiber::finish_from(Fiber& from) { switch_from(from, true); }

void Fiber::switch_from(Fiber& from, bool final) {
#if defined(GEOLOCO_EMULATOR_ASAN)
  __sanitizer_start_switch_fiber(final ? nullptr : &from.fake_stack_, stack_bottom_, stack_bytes_);
#else
  static_cast<void>(final);
#endif
#if defined(GEOLOCO_EMULATOR_FAST_FIBERS)
  geoloco_emulator_switch(&from.sp_, sp_);
#else
  swapcontext(&from.context_, &context_);
#endif
  from.arrived();  // back in `from`
}

void Fiber::arrived() {
#if defined(GEOLOCO_EMULATOR_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack_, nullptr, nullptr);
#endif
}

void Fiber::started(Fiber& from) {
#if defined(GEOLOCO_EMULATOR_ASAN)
  // The stack we came from is `from`'s: learn it, so switching back is announced with it.
  __sanitizer_finish_switch_fiber(nullptr, &from.stack_bottom_, &from.stack_bytes_);
#else
  (void)from;
#endif
}

#if defined(GEOLOCO_EMULATOR_FAST_FIBERS)

void Fiber::prepare(char* stack, std::size_t bytes, Entry entry) {
  // The frame geoloco_emulator_switch pops, from the top of the stack down:
  //   top-8: 0 (entry's return address: it never returns; the slot keeps
  //          rsp ≡ 8 mod 16 at entry, as after a call), top-16: entry,
  //   top-24 … top-64: rbp, rbx, r12, r13, r14, r15 (zero).
  auto top = reinterpret_cast<std::uintptr_t>(stack + bytes) & ~std::uintptr_t{15};
  auto* frame = reinterpret_cast<std::uint64_t*>(top) - 8;
  std::memset(frame, 0, 8 * sizeof(std::uint64_t));
  frame[6] = reinterpret_cast<std::uint64_t>(entry);
  sp_ = frame;
  stack_bottom_ = stack, stack_bytes_ = bytes, fake_stack_ = nullptr;
}

#else

void Fiber::prepare(char* stack, std::size_t bytes, Entry entry) {
  getcontext(&context_);
  context_.uc_stack.ss_sp = stack;
  context_.uc_stack.ss_size = bytes;
  context_.uc_link = nullptr;  // entry never returns
  makecontext(&context_, entry, 0);
  stack_bottom_ = stack, stack_bytes_ = bytes, fake_stack_ = nullptr;
}

#endif

}  // namespace geoloco::cuda_emulator
