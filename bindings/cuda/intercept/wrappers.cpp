// SPDX-License-Identifier: Apache-2.0
// The wrappers, one per symbol of hooked_symbols.def: gate -> forward -> account. The gates and
// accounts live beside what they gate (launch_gate, allocations, graphs, resolve); this file only
// stamps out the wrappers and the table of their addresses.
#include <optional>

#include "allocations.hpp"
#include "graphs.hpp"
#include "hook_table.hpp"
#include "job_link.hpp"
#include "launch_gate.hpp"
#include "mps_env.hpp"
#include "resolve.hpp"

#define TGS_HOOK(symbol, base, ptds, since, params, args, gate, account)         \
  extern "C" TGS_EXPORT CUresult symbol params noexcept {                         \
    using namespace tgs::cuda::intercept;                                         \
    namespace abi = tgs::cuda::abi;                                               \
    const auto g = gate;                                                          \
    if (const std::optional<CUresult> a = answer(g)) return *a;                   \
    const CUresult r = forward<hook_id::symbol> args;                             \
    if (r != CUDA_SUCCESS) [[unlikely]] note_failure(r);                          \
    account;                                                                      \
    return r;                                                                     \
  }
#include "hooked_symbols.def"

namespace tgs::cuda::intercept {

namespace {
/// The wrappers' addresses, indexed by `hook_id`.
void* const wrappers[hook_count] = {
#define TGS_HOOK(symbol, ...) reinterpret_cast<void*>(&::symbol),
#include "hooked_symbols.def"
};
}  // namespace

void* wrapper_address(hook_id id) noexcept { return wrappers[index(id)]; }

bool is_wrapper(const void* p) noexcept {
  for (const void* w : wrappers) {
    if (w == p) return true;
  }
  return false;
}

}  // namespace tgs::cuda::intercept
