// SPDX-License-Identifier: Apache-2.0
/// @file
/// How the interposer finds the driver behind each wrapper: glibc's dlsym (through dlvsym), the
/// loaded libcuda.so.1, the function each wrapper forwards to, and the wrappers' own addresses.
///
/// Every wrapper is gate -> `forward` -> account; `forward` is the only place a wrapper calls
/// the driver. The pointer it calls is filled by whichever lookup sees the driver's function
/// first: dlsym, cuGetProcAddress (`account_proc_address`), or a direct call resolving the next
/// definition after this library (`resolve_real`).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

#include "cuda_subset.hpp"
#include "hook_table.hpp"

/// What the library exports: `dlsym` and the wrappers; everything else is hidden.
#define TGS_EXPORT __attribute__((visibility("default")))

namespace tgs::cuda::intercept {

/// The driver function each wrapper forwards to, indexed by `hook_id`.
extern std::atomic<void*> real_fn[hook_count];

using dlsym_fn = void* (*)(void*, const char*);

/// glibc's dlsym, found through dlvsym (which is not overridden, so this cannot recurse).
[[nodiscard]] dlsym_fn real_dlsym() noexcept;
/// The loaded driver library (never loads it), to look up exports by name; nullptr if none.
[[nodiscard]] void* driver_handle() noexcept;
/// Resolves and records the driver function behind `id` on a direct call: the next definition
/// after this library (the driver when preloaded), else the loaded libcuda.so.1.
[[nodiscard]] void* resolve_real(hook_id id) noexcept;

/// The wrapper exported for `id`.
[[nodiscard]] void* wrapper_address(hook_id id) noexcept;
/// Whether `p` is one of this library's wrappers (a lookup must never record one as the driver).
[[nodiscard]] bool is_wrapper(const void* p) noexcept;

/// Calls the driver's function for `Id`. Without a driver it answers as the driver's stub does.
template <hook_id Id, typename... Args>
CUresult forward(Args... args) noexcept {
  void* p = real_fn[index(Id)].load(std::memory_order_acquire);
  if (p == nullptr) [[unlikely]] {
    p = resolve_real(Id);
    if (p == nullptr) return CUDA_ERROR_STUB_LIBRARY;
  }
  return reinterpret_cast<typename hook_signature<Id>::type>(p)(args...);
}

/// A driver function the interposer calls itself (not hooked), looked up in the driver.
template <typename Fn>
[[nodiscard]] Fn driver_fn(const char* name) noexcept {
  dlsym_fn dl = real_dlsym();
  void* h = driver_handle();
  return (dl == nullptr || h == nullptr) ? nullptr : reinterpret_cast<Fn>(dl(h, name));
}

/// Looks `name` up into `fn`; false when the driver lacks it. A table of such entry points is
/// complete when every lookup succeeded (`ok &= lookup(...)`), so its completeness is derived
/// from the lookups and cannot miss a member added later.
template <typename Fn>
bool lookup(Fn& fn, const char* name) noexcept {
  fn = driver_fn<Fn>(name);
  return fn != nullptr;
}

/// A gate that always lets the call through.
struct pass_token {};
constexpr pass_token gate_pass() noexcept { return {}; }
/// The gate's own answer to the call, if it gave one (a refusal, or the call served another
/// way): the wrapper then returns it without forwarding or accounting. Every gate's token has
/// an `answer` overload beside it.
constexpr std::optional<CUresult> answer(const pass_token&) noexcept { return std::nullopt; }

/// The account step of cuGetProcAddress: replaces the driver's function pointer with its
/// wrapper. The variant comes from the driver's rule (`classify`), checked against the driver's
/// exports: if the pointer is the export of a sibling variant, that sibling is the one wrapped.
void account_proc_address(CUresult r, const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) noexcept;

}  // namespace tgs::cuda::intercept
