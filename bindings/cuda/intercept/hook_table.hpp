// SPDX-License-Identifier: Apache-2.0
/// @file
/// The tables generated from `hooked_symbols.def`: the hook enum, the symbol table, the wrapper
/// signatures, and how a `cuGetProcAddress` request maps to one hooked variant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "cuda_subset.hpp"

namespace tgs::cuda::intercept {

/// One value per hooked driver symbol, in list order.
enum class hook_id : std::uint8_t {
#define TGS_HOOK(symbol, ...) symbol,
#include "hooked_symbols.def"
};

/// How many symbols the interposer hooks.
inline constexpr std::size_t hook_count = 0
#define TGS_HOOK(...) +1
#include "hooked_symbols.def"
    ;

/// What the list says about one hooked symbol.
struct hook_entry {
  const char* symbol;  ///< exported name, e.g. `cuLaunchKernel_ptsz`
  const char* base;    ///< name given to cuGetProcAddress, e.g. `cuLaunchKernel`
  bool ptds;           ///< the per-thread-default-stream variant
  int since;           ///< first CUDA version handing out this variant
};

/// The hooked symbols, indexed by `hook_id`.
inline constexpr hook_entry hook_table[hook_count] = {
#define TGS_HOOK(symbol, base, ptds, since, ...) {#symbol, #base, (ptds) != 0, since},
#include "hooked_symbols.def"
};

/// The C signature of each hooked symbol's function pointer.
template <hook_id Id>
struct hook_signature;
#define TGS_HOOK(symbol, base, ptds, since, params, ...) \
  template <>                                           \
  struct hook_signature<hook_id::symbol> {              \
    using type = CUresult(*) params;                    \
  };
#include "hooked_symbols.def"

[[nodiscard]] constexpr std::size_t index(hook_id id) noexcept { return static_cast<std::size_t>(id); }

/// The hooked symbol exported under `name`, if any (dlsym's question).
[[nodiscard]] inline std::optional<hook_id> find_symbol(const char* name) noexcept {
  for (std::size_t i = 0; i < hook_count; ++i) {
    if (std::strcmp(hook_table[i].symbol, name) == 0) return static_cast<hook_id>(i);
  }
  return std::nullopt;
}

/// The variant of `base` that the driver hands out to a `cuGetProcAddress(base, .., version,
/// flags)` request, following the driver's documented rule: the per-thread variant when `flags`
/// asks for the per-thread default stream (DEFAULT means legacy at the ABI: `cuda.h` adds the flag
/// itself for per-thread builds), and the newest variant whose `since` the version reaches.
/// Empty when no hooked variant fits (for example a version older than `cuMemAlloc_v2`): the
/// caller then gets the driver's pointer untouched.
[[nodiscard]] inline std::optional<hook_id> classify(const char* base, int cuda_version,
                                                     cuuint64_t flags) noexcept {
  const bool want_ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  bool base_has_ptds = false;
  for (const hook_entry& e : hook_table) {
    if (e.ptds && std::strcmp(e.base, base) == 0) base_has_ptds = true;
  }
  std::optional<hook_id> best;
  int best_since = -1;
  for (std::size_t i = 0; i < hook_count; ++i) {
    const hook_entry& e = hook_table[i];
    if (std::strcmp(e.base, base) != 0 || e.since > cuda_version) continue;
    if (base_has_ptds && e.ptds != want_ptds) continue;
    if (e.since > best_since) {
      best = static_cast<hook_id>(i);
      best_since = e.since;
    }
  }
  return best;
}

}  // namespace tgs::cuda::intercept
