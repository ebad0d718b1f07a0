// SPDX-License-Identifier: Apache-2.0
// A compile-only check that cuda_subset.hpp agrees with the CUDA toolkit's cuda.h: every constant
// and enum value it declares, every struct's size, member offsets and member types, and the
// signature of every hooked symbol and of every driver entry point the interposer looks up.
//
// Built only where find_package(CUDAToolkit) finds cuda.h (CI has no toolkit and skips it).
// cuda.h is included into namespace `real`, with __CUDA_API_VERSION_INTERNAL so that it declares
// every exported name (the `_ptsz` and `_v2` variants and the legacy forms) under its own name;
// `subset_t` maps a type of `real` to the subset's type of the same name, so two signatures can be
// compared as types. The programs' prototypes (driver_api.hpp) cannot sit beside it: a C function
// declared twice with different parameter types is ill-formed, so they are not checked here.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "cuda_subset.hpp"
#include "evictor.hpp"
#include "graphs.hpp"
#include "hook_table.hpp"
#include "launch_gate.hpp"

#define __CUDA_API_VERSION_INTERNAL 1
namespace real {
#include <cuda.h>
}  // namespace real

namespace {

/// The subset's type for a type of `real`: the same name outside `real`, structurally for
/// pointers, const and function types, and the type itself for built-in types. The opaque
/// handles' structs (`CUstream_st`, ...) need no entry: cuda.h names them only in
/// `typedef struct CUstream_st* CUstream;`, which finds the subset's declaration of the struct,
/// so both headers name the same type.
template <typename T>
struct subset {
  using type = T;
};
template <typename T>
using subset_t = typename subset<T>::type;
template <typename T>
struct subset<T*> {
  using type = subset_t<T>*;
};
template <typename T>
struct subset<const T> {
  using type = const subset_t<T>;
};
template <typename R, typename... A>
struct subset<R(A...)> {
  using type = subset_t<R>(subset_t<A>...);
};

#define TGS_SAME_TYPE(name)     \
  template <>                   \
  struct subset<real::name> {   \
    using type = ::name;        \
  };
TGS_SAME_TYPE(CUresult)
TGS_SAME_TYPE(CUgraphExecUpdateResultInfo_st)
TGS_SAME_TYPE(CUDA_GRAPH_INSTANTIATE_PARAMS_st)
TGS_SAME_TYPE(CUmemAllocationProp_st)
TGS_SAME_TYPE(CUlaunchAttribute_st)
TGS_SAME_TYPE(CUlaunchConfig)
TGS_SAME_TYPE(CUDA_KERNEL_NODE_PARAMS_v2)
TGS_SAME_TYPE(CUgraphNodeType)
TGS_SAME_TYPE(CUdriverProcAddressQueryResult)
TGS_SAME_TYPE(CUstreamCaptureStatus)
TGS_SAME_TYPE(CUstreamCaptureMode)
TGS_SAME_TYPE(CUmemLocationType)
TGS_SAME_TYPE(CUmemLocation)
TGS_SAME_TYPE(CUmem_advise)
#undef TGS_SAME_TYPE

// --- scalar typedefs -------------------------------------------------------------------------
static_assert(std::is_same_v<real::cuuint64_t, cuuint64_t>);
static_assert(std::is_same_v<real::CUdeviceptr, CUdeviceptr>);
static_assert(std::is_same_v<real::CUdevice, CUdevice>);
static_assert(std::is_same_v<real::CUmemGenericAllocationHandle, CUmemGenericAllocationHandle>);
static_assert(std::is_same_v<subset_t<real::CUcontext>, CUcontext>);
static_assert(std::is_same_v<subset_t<real::CUmodule>, CUmodule>);
static_assert(std::is_same_v<subset_t<real::CUfunction>, CUfunction>);
static_assert(std::is_same_v<subset_t<real::CUstream>, CUstream>);
static_assert(std::is_same_v<subset_t<real::CUgraphExec>, CUgraphExec>);
static_assert(std::is_same_v<subset_t<real::CUgraph>, CUgraph>);
static_assert(std::is_same_v<subset_t<real::CUevent>, CUevent>);
static_assert(std::is_same_v<subset_t<real::CUgraphNode>, CUgraphNode>);
static_assert(std::is_same_v<subset_t<real::CUkernel>, CUkernel>);
static_assert(std::is_same_v<subset_t<real::CUmemoryPool>, CUmemoryPool>);
static_assert(std::is_same_v<subset_t<real::CUgraphExecUpdateResultInfo>, CUgraphExecUpdateResultInfo>);
static_assert(std::is_same_v<subset_t<real::CUDA_GRAPH_INSTANTIATE_PARAMS>, CUDA_GRAPH_INSTANTIATE_PARAMS>);
static_assert(std::is_same_v<subset_t<real::CUmemAllocationProp>, CUmemAllocationProp>);
static_assert(std::is_same_v<subset_t<real::CUlaunchAttribute>, CUlaunchAttribute>);

// --- enum values and constants ---------------------------------------------------------------
#define TGS_SAME_VALUE(name) \
  static_assert(static_cast<long long>(::name) == static_cast<long long>(real::name), #name " differs from cuda.h");
TGS_SAME_VALUE(CUDA_SUCCESS)
TGS_SAME_VALUE(CUDA_ERROR_INVALID_VALUE)
TGS_SAME_VALUE(CUDA_ERROR_OUT_OF_MEMORY)
TGS_SAME_VALUE(CUDA_ERROR_NOT_INITIALIZED)
TGS_SAME_VALUE(CUDA_ERROR_STUB_LIBRARY)
TGS_SAME_VALUE(CUDA_ERROR_NO_DEVICE)
TGS_SAME_VALUE(CUDA_ERROR_INVALID_DEVICE)
TGS_SAME_VALUE(CUDA_ERROR_INVALID_CONTEXT)
TGS_SAME_VALUE(CUDA_ERROR_CONTAINED)
TGS_SAME_VALUE(CUDA_ERROR_INVALID_HANDLE)
TGS_SAME_VALUE(CUDA_ERROR_ILLEGAL_STATE)
TGS_SAME_VALUE(CUDA_ERROR_NOT_FOUND)
TGS_SAME_VALUE(CUDA_ERROR_NOT_READY)
TGS_SAME_VALUE(CUDA_ERROR_ILLEGAL_ADDRESS)
TGS_SAME_VALUE(CUDA_ERROR_LAUNCH_TIMEOUT)
TGS_SAME_VALUE(CUDA_ERROR_ASSERT)
TGS_SAME_VALUE(CUDA_ERROR_HARDWARE_STACK_ERROR)
TGS_SAME_VALUE(CUDA_ERROR_ILLEGAL_INSTRUCTION)
TGS_SAME_VALUE(CUDA_ERROR_MISALIGNED_ADDRESS)
TGS_SAME_VALUE(CUDA_ERROR_INVALID_ADDRESS_SPACE)
TGS_SAME_VALUE(CUDA_ERROR_INVALID_PC)
TGS_SAME_VALUE(CUDA_ERROR_LAUNCH_FAILED)
TGS_SAME_VALUE(CUDA_ERROR_TENSOR_MEMORY_LEAK)
TGS_SAME_VALUE(CUDA_ERROR_NOT_SUPPORTED)
TGS_SAME_VALUE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
TGS_SAME_VALUE(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
TGS_SAME_VALUE(CUDA_ERROR_CAPTURED_EVENT)
TGS_SAME_VALUE(CU_GRAPH_NODE_TYPE_KERNEL)
TGS_SAME_VALUE(CU_GRAPH_NODE_TYPE_GRAPH)
TGS_SAME_VALUE(CU_GET_PROC_ADDRESS_DEFAULT)
TGS_SAME_VALUE(CU_GET_PROC_ADDRESS_LEGACY_STREAM)
TGS_SAME_VALUE(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
TGS_SAME_VALUE(CU_GET_PROC_ADDRESS_SUCCESS)
TGS_SAME_VALUE(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
TGS_SAME_VALUE(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
TGS_SAME_VALUE(CU_EVENT_DEFAULT)
TGS_SAME_VALUE(CU_EVENT_DISABLE_TIMING)
TGS_SAME_VALUE(CU_STREAM_CAPTURE_STATUS_NONE)
TGS_SAME_VALUE(CU_STREAM_CAPTURE_STATUS_ACTIVE)
TGS_SAME_VALUE(CU_STREAM_CAPTURE_STATUS_INVALIDATED)
TGS_SAME_VALUE(CU_STREAM_CAPTURE_MODE_GLOBAL)
TGS_SAME_VALUE(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
TGS_SAME_VALUE(CU_STREAM_CAPTURE_MODE_RELAXED)
TGS_SAME_VALUE(CU_MEM_ATTACH_GLOBAL)
TGS_SAME_VALUE(CU_MEM_ATTACH_HOST)
TGS_SAME_VALUE(CU_MEM_LOCATION_TYPE_INVALID)
TGS_SAME_VALUE(CU_MEM_LOCATION_TYPE_DEVICE)
TGS_SAME_VALUE(CU_MEM_LOCATION_TYPE_HOST)
TGS_SAME_VALUE(CU_MEM_ADVISE_SET_PREFERRED_LOCATION)
TGS_SAME_VALUE(CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION)
TGS_SAME_VALUE(CU_MEM_ADVISE_SET_ACCESSED_BY)
TGS_SAME_VALUE(CU_MEM_ADVISE_UNSET_ACCESSED_BY)
#undef TGS_SAME_VALUE

// The special stream handles are macros in cuda.h (`((CUstream)0x1)`), which cannot be evaluated
// as constants: their spelling is read instead, and its number compared with the subset's.
#define TGS_SPELLING(x) TGS_SPELLING_(x)
#define TGS_SPELLING_(x) #x
constexpr std::uintptr_t hex_in(const char* s) {
  while (*s != '\0' && !(s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))) ++s;
  if (*s == '\0') return ~std::uintptr_t{0};
  std::uintptr_t v = 0;
  for (s += 2; (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') || (*s >= 'A' && *s <= 'F'); ++s) {
    v = v * 16 + static_cast<std::uintptr_t>(*s <= '9' ? *s - '0' : (*s | 0x20) - 'a' + 10);
  }
  return v;
}
static_assert(hex_in(TGS_SPELLING(CU_STREAM_LEGACY)) == cu_stream_legacy_handle);
static_assert(hex_in(TGS_SPELLING(CU_STREAM_PER_THREAD)) == cu_stream_per_thread_handle);

// --- enum sizes and struct layouts -----------------------------------------------------------
#define TGS_SAME_SIZE(name) static_assert(sizeof(::name) == sizeof(real::name), "sizeof(" #name ") differs");
TGS_SAME_SIZE(CUresult)
TGS_SAME_SIZE(CUgraphNodeType)
TGS_SAME_SIZE(CUdriverProcAddressQueryResult)
TGS_SAME_SIZE(CUstreamCaptureStatus)
TGS_SAME_SIZE(CUstreamCaptureMode)
TGS_SAME_SIZE(CUmemLocationType)
TGS_SAME_SIZE(CUmem_advise)
TGS_SAME_SIZE(CUlaunchConfig)
TGS_SAME_SIZE(CUDA_KERNEL_NODE_PARAMS_v2)
TGS_SAME_SIZE(CUmemLocation)
#undef TGS_SAME_SIZE

#define TGS_SAME_MEMBER(type, member)                                                                   \
  static_assert(offsetof(::type, member) == offsetof(real::type, member), #type "::" #member " moved"); \
  static_assert(std::is_same_v<subset_t<decltype(real::type::member)>, decltype(::type::member)>,      \
                #type "::" #member " has another type");
TGS_SAME_MEMBER(CUlaunchConfig, gridDimX)
TGS_SAME_MEMBER(CUlaunchConfig, gridDimY)
TGS_SAME_MEMBER(CUlaunchConfig, gridDimZ)
TGS_SAME_MEMBER(CUlaunchConfig, blockDimX)
TGS_SAME_MEMBER(CUlaunchConfig, blockDimY)
TGS_SAME_MEMBER(CUlaunchConfig, blockDimZ)
TGS_SAME_MEMBER(CUlaunchConfig, sharedMemBytes)
TGS_SAME_MEMBER(CUlaunchConfig, hStream)
TGS_SAME_MEMBER(CUlaunchConfig, attrs)
TGS_SAME_MEMBER(CUlaunchConfig, numAttrs)
TGS_SAME_MEMBER(CUDA_KERNEL_NODE_PARAMS_v2, func)
TGS_SAME_MEMBER(CUDA_KERNEL_NODE_PARAMS_v2, gridDimX)
TGS_SAME_MEMBER(CUDA_KERNEL_NODE_PARAMS_v2, gridDimY)
TGS_SAME_MEMBER(CUDA_KERNEL_NODE_PARAMS_v2, gridDimZ)
TGS_SAME_MEMBER(CUDA_KERNEL_NODE_PARAMS_v2, blockDimX)
TGS_SAME_MEMBER(CUDA_KERNEL_NODE_PARAMS_v2, blockDimY)
TGS_SAME_MEMBER(CUDA_KERNEL_NODE_PARAMS_v2, blockDimZ)
TGS_SAME_MEMBER(CUDA_KERNEL_NODE_PARAMS_v2, sharedMemBytes)
TGS_SAME_MEMBER(CUDA_KERNEL_NODE_PARAMS_v2, kernelParams)
TGS_SAME_MEMBER(CUDA_KERNEL_NODE_PARAMS_v2, extra)
TGS_SAME_MEMBER(CUDA_KERNEL_NODE_PARAMS_v2, kern)
TGS_SAME_MEMBER(CUDA_KERNEL_NODE_PARAMS_v2, ctx)
TGS_SAME_MEMBER(CUmemLocation, type)
TGS_SAME_MEMBER(CUmemLocation, id)
#undef TGS_SAME_MEMBER

// --- signatures: every hooked symbol, and the entry points the interposer looks up -----------
using namespace tgs::cuda::intercept;

#define TGS_HOOK(symbol, ...)                                                                   \
  static_assert(std::is_same_v<subset_t<decltype(&real::symbol)>, hook_signature<hook_id::symbol>::type>, \
                #symbol ": hooked_symbols.def disagrees with cuda.h");
#include "hooked_symbols.def"

#define TGS_SAME_ENTRY(table, member, symbol)                                          \
  static_assert(std::is_same_v<subset_t<decltype(&real::symbol)>, decltype(table::member)>, \
                #table "::" #member " is not the type of " #symbol);
TGS_SAME_ENTRY(event_api, ctx_get_current, cuCtxGetCurrent)
TGS_SAME_ENTRY(event_api, event_create, cuEventCreate)
TGS_SAME_ENTRY(event_api, event_record, cuEventRecord)
TGS_SAME_ENTRY(event_api, event_query, cuEventQuery)
TGS_SAME_ENTRY(event_api, event_destroy, cuEventDestroy_v2)
TGS_SAME_ENTRY(event_api, stream_is_capturing, cuStreamIsCapturing)
TGS_SAME_ENTRY(event_api, exchange_capture_mode, cuThreadExchangeStreamCaptureMode)
TGS_SAME_ENTRY(unified_memory_api, ctx_get_current, cuCtxGetCurrent)
TGS_SAME_ENTRY(unified_memory_api, ctx_set_current, cuCtxSetCurrent)
TGS_SAME_ENTRY(unified_memory_api, ctx_get_device, cuCtxGetDevice)
TGS_SAME_ENTRY(unified_memory_api, stream_create, cuStreamCreate)
TGS_SAME_ENTRY(unified_memory_api, stream_synchronize, cuStreamSynchronize)
TGS_SAME_ENTRY(unified_memory_api, mem_advise, cuMemAdvise_v2)
TGS_SAME_ENTRY(unified_memory_api, mem_prefetch, cuMemPrefetchAsync_v2)
TGS_SAME_ENTRY(unified_memory_api, mem_get_info, cuMemGetInfo_v2)
TGS_SAME_ENTRY(graph_api, get_nodes, cuGraphGetNodes)
TGS_SAME_ENTRY(graph_api, node_type, cuGraphNodeGetType)
TGS_SAME_ENTRY(graph_api, kernel_params, cuGraphKernelNodeGetParams_v2)
TGS_SAME_ENTRY(graph_api, child_graph, cuGraphChildGraphNodeGetGraph)
#undef TGS_SAME_ENTRY

}  // namespace
