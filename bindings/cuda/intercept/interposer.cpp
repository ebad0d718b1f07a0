// SPDX-License-Identifier: Apache-2.0
// The interposer's wrappers, generated from hooked_symbols.def, and the dlsym / cuGetProcAddress
// overrides that hand them out instead of the driver's functions.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <unordered_map>

#include "cuda_subset.hpp"
#include "hook_table.hpp"
#include "job_link.hpp"

#define TGS_EXPORT __attribute__((visibility("default")))

namespace tgs::cuda::intercept {
namespace {

// --- the driver's functions ---------------------------------------------------------------------

/// The driver function each wrapper forwards to, filled by whichever lookup sees it first:
/// dlsym, cuGetProcAddress, or a direct call resolving the next definition after this library.
std::atomic<void*> real_fn[hook_count];

using dlsym_fn = void* (*)(void*, const char*);
std::atomic<dlsym_fn> real_dlsym_fn{nullptr};

/// glibc's dlsym, found through dlvsym (which is not overridden, so this cannot recurse).
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

/// The loaded driver library, if any, to look up exports by name.
void* driver_handle() noexcept {
  static std::atomic<void*> handle{nullptr};
  void* h = handle.load(std::memory_order_acquire);
  if (h == nullptr) {
    h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (h != nullptr) handle.store(h, std::memory_order_release);
  }
  return h;
}

}  // namespace

void* wrapper_address(hook_id id) noexcept;
bool is_wrapper(const void* p) noexcept;

namespace {

/// Resolves the driver function behind a wrapper on a direct call: the next definition after
/// this library (the driver when preloaded), else the loaded libcuda.so.1.
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

// --- gates and accounts ---------------------------------------------------------------------------

/// A gate that always lets the call through.
struct pass_token {};
constexpr pass_token gate_pass() noexcept { return {}; }

/// Whether a gate refused the call, and with which status.
constexpr CUresult refusal(const pass_token&) noexcept { return CUDA_SUCCESS; }
constexpr CUresult refusal(const launch_token&) noexcept { return CUDA_SUCCESS; }

/// Thread blocks of a grid, saturating instead of wrapping for out-of-range dimensions.
constexpr std::uint64_t grid_blocks(unsigned gx, unsigned gy, unsigned gz) noexcept {
  std::uint64_t xy = 0;
  std::uint64_t xyz = 0;
  if (__builtin_mul_overflow(std::uint64_t{gx}, std::uint64_t{gy}, &xy) ||
      __builtin_mul_overflow(xy, std::uint64_t{gz}, &xyz)) {
    return UINT64_MAX;
  }
  return xyz;
}

std::uint64_t config_blocks(const CUlaunchConfig* config) noexcept {
  return config == nullptr ? 0 : grid_blocks(config->gridDimX, config->gridDimY, config->gridDimZ);
}

/// A graph launch's blocks: not known without walking the graph (see hooked_symbols.def).
constexpr std::uint64_t graph_blocks = 0;

/// Which counter an allocation lands in.
enum class memory_kind : std::uint8_t { device, managed, physical };

/// A live allocation, and the segment it was counted in (a registration that came later must not
/// see a free of bytes it never counted).
struct alloc_record {
  std::uint64_t bytes = 0;
  memory_kind kind = memory_kind::device;
  abi::job_segment* counted_in = nullptr;
};

std::mutex alloc_mutex;
/// Heap-allocated and never destroyed: frees may arrive from other libraries' exit handlers.
std::unordered_map<std::uint64_t, alloc_record>* live_allocs = nullptr;

std::atomic<std::uint64_t>& bytes_counter(abi::job_segment& seg, memory_kind kind) noexcept {
  return kind == memory_kind::managed ? seg.managed_bytes : seg.device_bytes;
}

/// Counts a successful allocation of `bytes` at `*key` (a device pointer or a cuMemCreate handle).
void account_alloc(CUresult r, const unsigned long long* key, std::size_t bytes, memory_kind kind) noexcept {
  if (r != CUDA_SUCCESS || key == nullptr) return;
  abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  try {
    std::lock_guard lock(alloc_mutex);
    if (live_allocs == nullptr) live_allocs = new std::unordered_map<std::uint64_t, alloc_record>();
    (*live_allocs)[*key] = alloc_record{bytes, kind, seg};
  } catch (...) {
    return;  // out of host memory: the allocation stands, it just goes uncounted
  }
  if (seg != nullptr) {
    bytes_counter(*seg, kind).fetch_add(bytes, std::memory_order_relaxed);
    seg->alloc_calls.fetch_add(1, std::memory_order_relaxed);
  }
}

void account_alloc_pitch(CUresult r, const CUdeviceptr* dptr, const std::size_t* pitch, std::size_t height) noexcept {
  if (pitch != nullptr) account_alloc(r, dptr, *pitch * height, memory_kind::device);
}

/// The record a free takes out of the table before the driver call, so a concurrent allocation
/// reusing the address cannot be confused with it.
struct free_token {
  std::uint64_t key = 0;
  std::optional<alloc_record> record;
};
constexpr CUresult refusal(const free_token&) noexcept { return CUDA_SUCCESS; }

free_token gate_free(std::uint64_t key, memory_kind) noexcept {
  free_token token{key, std::nullopt};
  try {
    std::lock_guard lock(alloc_mutex);
    if (live_allocs == nullptr) return token;
    if (auto it = live_allocs->find(key); it != live_allocs->end()) {
      token.record = it->second;
      live_allocs->erase(it);
    }
  } catch (...) {
  }
  return token;
}

void account_free(const free_token& token, CUresult r) noexcept {
  if (!token.record) return;
  if (r != CUDA_SUCCESS) {  // the driver kept the allocation: so do we
    try {
      std::lock_guard lock(alloc_mutex);
      if (live_allocs != nullptr) live_allocs->emplace(token.key, *token.record);
    } catch (...) {
    }
    return;
  }
  abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  if (seg != nullptr && seg == token.record->counted_in) {
    bytes_counter(*seg, token.record->kind).fetch_sub(token.record->bytes, std::memory_order_relaxed);
    seg->free_calls.fetch_add(1, std::memory_order_relaxed);
  }
}

void account_map(CUresult r) noexcept {
  if (r != CUDA_SUCCESS) return;
  if (abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment) {
    seg->map_calls.fetch_add(1, std::memory_order_relaxed);
  }
}

/// A managed-allocation gate that may refuse.
struct managed_token {
  CUresult refused = CUDA_SUCCESS;
};
constexpr CUresult refusal(const managed_token& t) noexcept { return t.refused; }

/// Refuses a managed allocation larger than the GPU's free memory unless the operator allows it
/// (TGS_ALLOW_MANAGED_OVERSUBSCRIPTION=1): oversubscribing a shared card's unified memory can
/// stall every process on it, so it must be a deliberate choice, not an accident.
managed_token gate_managed(std::size_t bytes) noexcept {
  if (const char* allow = std::getenv("TGS_ALLOW_MANAGED_OVERSUBSCRIPTION"); allow != nullptr && allow[0] == '1') {
    return {};
  }
  using mem_get_info_fn = CUresult (*)(std::size_t*, std::size_t*);
  dlsym_fn dl = real_dlsym();
  void* h = driver_handle();
  if (dl == nullptr || h == nullptr) return {};
  auto get_info = reinterpret_cast<mem_get_info_fn>(dl(h, "cuMemGetInfo_v2"));
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (get_info == nullptr || get_info(&free_bytes, &total_bytes) != CUDA_SUCCESS) return {};
  if (bytes <= free_bytes) return {};
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    log(log_level::warn,
        "refused cuMemAllocManaged of %zu bytes: only %zu bytes of GPU memory are free "
        "(set TGS_ALLOW_MANAGED_OVERSUBSCRIPTION=1 to allow oversubscription)",
        bytes, free_bytes);
  }
  return {CUDA_ERROR_OUT_OF_MEMORY};
}

/// Replaces a driver function pointer handed out by cuGetProcAddress with its wrapper. The
/// variant comes from the driver's rule (`classify`), checked against the driver's exports: if
/// the pointer is the export of a sibling variant, that sibling is the one wrapped.
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

}  // namespace
}  // namespace tgs::cuda::intercept

// --- the wrappers: gate -> forward -> account, one per listed symbol --------------------------------

#define TGS_HOOK(symbol, base, ptds, since, params, args, gate, account)         \
  extern "C" TGS_EXPORT CUresult symbol params noexcept {                         \
    using namespace tgs::cuda::intercept;                                         \
    const auto g = gate;                                                          \
    if (const CUresult why = refusal(g); why != CUDA_SUCCESS) return why;         \
    const CUresult r = forward<hook_id::symbol> args;                             \
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
