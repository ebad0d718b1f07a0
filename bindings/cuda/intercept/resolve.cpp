// SPDX-License-Identifier: Apache-2.0
// Symbol resolution: the driver behind each wrapper, and the dlsym / cuGetProcAddress overrides
// that hand out wrappers instead of the driver's functions.
#include "resolve.hpp"

#include <dlfcn.h>

#include <cstring>

#include "job_link.hpp"

namespace tgs::cuda::intercept {

std::atomic<void*> real_fn[hook_count];

namespace {
std::atomic<dlsym_fn> real_dlsym_fn{nullptr};
}  // namespace

dlsym_fn real_dlsym() noexcept {
  dlsym_fn f = real_dlsym_fn.load(std::memory_order_acquire);
  if (f != nullptr) return f;
  void* p = nullptr;
  for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"}) {
    p = dlvsym(RTLD_NEXT, "dlsym", version);
    if (p != nullptr) break;
  }
  f = reinterpret_cast<dlsym_fn>(p);
  real_dlsym_fn.store(f, std::memory_order_release);
  return f;
}

void* driver_handle() noexcept {
  static std::atomic<void*> handle{nullptr};
  void* h = handle.load(std::memory_order_acquire);
  if (h == nullptr) {
    h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (h != nullptr) handle.store(h, std::memory_order_release);
  }
  return h;
}

void* resolve_real(hook_id id) noexcept {
  const char* symbol = hook_table[index(id)].symbol;
  dlsym_fn dl = real_dlsym();
  if (dl == nullptr) return nullptr;
  void* p = dl(RTLD_NEXT, symbol);
  if (p == nullptr || is_wrapper(p)) {
    void* h = driver_handle();
    p = h != nullptr ? dl(h, symbol) : nullptr;
  }
  if (p == nullptr || is_wrapper(p)) return nullptr;
  real_fn[index(id)].store(p, std::memory_order_release);
  return p;
}

void account_proc_address(CUresult r, const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) noexcept {
  (void)ensure_link();  // the runtime's first driver call: register before the first launch
  if (r != CUDA_SUCCESS || symbol == nullptr || pfn == nullptr || *pfn == nullptr) return;
  std::optional<hook_id> id = classify(symbol, cuda_version, flags);
  if (!id) return;
  void* p = *pfn;
  if (is_wrapper(p)) return;
  dlsym_fn dl = real_dlsym();
  void* h = driver_handle();
  if (dl != nullptr && h != nullptr && dl(h, hook_table[index(*id)].symbol) != p) {
    for (std::size_t i = 0; i < hook_count; ++i) {
      if (std::strcmp(hook_table[i].base, symbol) == 0 && dl(h, hook_table[i].symbol) == p) {
        id = static_cast<hook_id>(i);
        break;
      }
    }
  }
  real_fn[index(*id)].store(p, std::memory_order_release);
  *pfn = wrapper_address(*id);
}

}  // namespace tgs::cuda::intercept

// --- dlsym ---------------------------------------------------------------------------------------
// Programs (and the CUDA runtime) find driver functions with dlsym; a hooked name gets its wrapper.
// Every other lookup must behave exactly as glibc's, including RTLD_NEXT, which glibc resolves
// relative to its caller's return address. On x86-64 a small entry stub therefore asks
// `tgs_dlsym_route` first and then *jumps* to glibc's dlsym with the caller's registers and return
// address intact. Both glibc symbol versions of dlsym are defined (GLIBC_2.2.5 for binaries
// linked before glibc 2.34, GLIBC_2.34 after).

/// Where a dlsym call goes: a wrapper to return, or glibc's dlsym to jump to.
struct dlsym_route {
  void* result;
  void* jump;
};

extern "C" __attribute__((visibility("hidden"))) dlsym_route tgs_dlsym_route(void* handle, const char* name) noexcept {
  using namespace tgs::cuda::intercept;
  dlsym_fn real = real_dlsym();
  if (real != nullptr && name != nullptr && name[0] == 'c' && name[1] == 'u') {
    if (const std::optional<hook_id> id = find_symbol(name)) {
      // A hooked name resolves relative to this library: the driver is after it in every order.
      if (void* p = real(handle, name)) {
        if (!is_wrapper(p)) real_fn[index(*id)].store(p, std::memory_order_release);
        return {wrapper_address(*id), nullptr};
      }
    }
  }
  return {nullptr, reinterpret_cast<void*>(real)};
}

#if defined(__x86_64__)
asm(R"(
    .text
    .globl tgs_dlsym_glibc_2_34
    .globl tgs_dlsym_glibc_2_2_5
    .type tgs_dlsym_glibc_2_34, @function
    .type tgs_dlsym_glibc_2_2_5, @function
    .p2align 4
tgs_dlsym_glibc_2_34:
tgs_dlsym_glibc_2_2_5:
    .cfi_startproc
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call tgs_dlsym_route
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rdx, %rdx
    jnz 1f
    ret
1:
    jmp *%rdx
    .cfi_endproc
    .size tgs_dlsym_glibc_2_34, .-tgs_dlsym_glibc_2_34
    .size tgs_dlsym_glibc_2_2_5, .-tgs_dlsym_glibc_2_2_5
    .symver tgs_dlsym_glibc_2_34, dlsym@@GLIBC_2.34
    .symver tgs_dlsym_glibc_2_2_5, dlsym@GLIBC_2.2.5
)");
#else
// Elsewhere dlsym is overridden in C++: RTLD_NEXT lookups of other names then resolve relative
// to this library instead of their caller (documented in docs/cuda-backend.md).
extern "C" TGS_EXPORT void* dlsym(void* handle, const char* name) noexcept {
  const dlsym_route route = tgs_dlsym_route(handle, name);
  if (route.jump == nullptr) return route.result;
  return reinterpret_cast<tgs::cuda::intercept::dlsym_fn>(route.jump)(handle, name);
}
#endif
