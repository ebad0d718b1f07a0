// SPDX-License-Identifier: Apache-2.0
/// @file
/// The few CUDA driver types, enums and constants the backend needs, declared without `cuda.h`.
///
/// The backend must build where no CUDA toolkit is installed (CI, a fresh Debian), so it declares
/// the ABI it touches itself. Every value here matches `cuda.h` of CUDA 12 and 13 (the driver
/// ABI is stable across releases); the layouts are checked by the `static_assert`s below, and
/// where the CUDA toolkit is installed the build checks every value, layout and signature against
/// its `cuda.h` (`cuda_subset_check.cpp`).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

/// Driver call status (`cudaError_enum` in `cuda.h`; four bytes, returned in a register).
typedef enum cudaError_enum : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_CONTAINED = 226,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_ILLEGAL_STATE = 401,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_TIMEOUT = 702,
  CUDA_ERROR_ASSERT = 710,
  CUDA_ERROR_HARDWARE_STACK_ERROR = 714,
  CUDA_ERROR_ILLEGAL_INSTRUCTION = 715,
  CUDA_ERROR_MISALIGNED_ADDRESS = 716,
  CUDA_ERROR_INVALID_ADDRESS_SPACE = 717,
  CUDA_ERROR_INVALID_PC = 718,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_TENSOR_MEMORY_LEAK = 721,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
  CUDA_ERROR_CAPTURED_EVENT = 907,
} CUresult;

typedef std::uint64_t cuuint64_t;
typedef unsigned long long CUdeviceptr;  // CUdeviceptr_v2 on 64-bit hosts
typedef int CUdevice;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUgraph_st* CUgraph;
typedef struct CUevent_st* CUevent;
typedef struct CUgraphNode_st* CUgraphNode;
typedef struct CUkern_st* CUkernel;
/// Opaque here: only passed on.
typedef struct CUgraphExecUpdateResultInfo_st CUgraphExecUpdateResultInfo;
typedef struct CUDA_GRAPH_INSTANTIATE_PARAMS_st CUDA_GRAPH_INSTANTIATE_PARAMS;
typedef struct CUmemPoolHandle_st* CUmemoryPool;
/// Opaque here: the interposer only passes the pointer on.
typedef struct CUmemAllocationProp_st CUmemAllocationProp;
/// Opaque here: `CUlaunchConfig::attrs` is only passed on.
typedef struct CUlaunchAttribute_st CUlaunchAttribute;

/// The launch configuration of `cuLaunchKernelEx` (layout as in `cuda.h`).
typedef struct CUlaunchConfig_st {
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

/// A kernel node's parameters (`CUDA_KERNEL_NODE_PARAMS_v2`, layout as in `cuda.h`).
typedef struct CUDA_KERNEL_NODE_PARAMS_v2_st {
  CUfunction func;
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  void** kernelParams;
  void** extra;
  CUkernel kern;
  CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS_v2;

/// Graph node types (`CUgraphNodeType`); the two whose blocks count.
typedef enum CUgraphNodeType_enum : int {
  CU_GRAPH_NODE_TYPE_KERNEL = 0,
  CU_GRAPH_NODE_TYPE_GRAPH = 4,
} CUgraphNodeType;

/// Search flags of `cuGetProcAddress` (`CUdriverProcAddress_flags`).
enum : cuuint64_t {
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
  CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1 << 0,
  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1,
};

/// What `cuGetProcAddress_v2` reports about a lookup.
typedef enum CUdriverProcAddressQueryResult_enum : int {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
} CUdriverProcAddressQueryResult;

/// `cuEventCreate` flags (`CUevent_flags`); the subset the launch window uses.
enum : unsigned int { CU_EVENT_DEFAULT = 0x0, CU_EVENT_DISABLE_TIMING = 0x2 };

/// Whether a stream is capturing into a graph (`CUstreamCaptureStatus`).
typedef enum CUstreamCaptureStatus_enum : int {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
} CUstreamCaptureStatus;

/// Which calls a capture forbids to other threads (`CUstreamCaptureMode`).
typedef enum CUstreamCaptureMode_enum : int {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2,
} CUstreamCaptureMode;

/// `cuMemAllocManaged` attach flags.
enum : unsigned int { CU_MEM_ATTACH_GLOBAL = 0x1, CU_MEM_ATTACH_HOST = 0x2 };

/// Where memory lives (`CUmemLocationType`); the subset unified memory uses.
typedef enum CUmemLocationType_enum : int {
  CU_MEM_LOCATION_TYPE_INVALID = 0,
  CU_MEM_LOCATION_TYPE_DEVICE = 1,  ///< `id` is a device ordinal
  CU_MEM_LOCATION_TYPE_HOST = 2,    ///< `id` is ignored
} CUmemLocationType;

/// A memory location (`CUmemLocation`), passed by value to `cuMemAdvise_v2` and
/// `cuMemPrefetchAsync_v2`.
typedef struct CUmemLocation_st {
  CUmemLocationType type;
  int id;
} CUmemLocation;

/// Advice for `cuMemAdvise_v2` (`CUmem_advise`); the subset TGS uses.
typedef enum CUmem_advise_enum : int {
  CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3,
  CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION = 4,
  CU_MEM_ADVISE_SET_ACCESSED_BY = 5,
  CU_MEM_ADVISE_UNSET_ACCESSED_BY = 6,
} CUmem_advise;

}  // extern "C"

/// The special stream handles (macros in `cuda.h`): the legacy default stream, and the calling
/// thread's default stream (what a null stream means to the `_ptsz` functions).
inline constexpr std::uintptr_t cu_stream_legacy_handle = 0x1;
inline constexpr std::uintptr_t cu_stream_per_thread_handle = 0x2;
inline CUstream const CU_STREAM_LEGACY = reinterpret_cast<CUstream>(cu_stream_legacy_handle);
inline CUstream const CU_STREAM_PER_THREAD = reinterpret_cast<CUstream>(cu_stream_per_thread_handle);

/// The stream a launch goes to: for a `_ptsz` form (`per_thread`) a null stream is the calling
/// thread's default stream, which names another stream in every thread.
[[nodiscard]] inline CUstream launch_stream_of(CUstream stream, bool per_thread) noexcept {
  return stream == nullptr && per_thread ? CU_STREAM_PER_THREAD : stream;
}

static_assert(sizeof(CUresult) == 4);
static_assert(sizeof(CUdriverProcAddressQueryResult) == 4);
static_assert(sizeof(CUdeviceptr) == 8, "the backend supports 64-bit hosts only");
static_assert(offsetof(CUlaunchConfig, hStream) == 32);
static_assert(offsetof(CUlaunchConfig, attrs) == 40);
static_assert(offsetof(CUlaunchConfig, numAttrs) == 48);
static_assert(sizeof(CUlaunchConfig) == 56);
static_assert(sizeof(CUmemLocation) == 8);
static_assert(offsetof(CUDA_KERNEL_NODE_PARAMS_v2, gridDimX) == 8);
static_assert(offsetof(CUDA_KERNEL_NODE_PARAMS_v2, kernelParams) == 40);
static_assert(sizeof(CUDA_KERNEL_NODE_PARAMS_v2) == 72);
static_assert(sizeof(CUgraphNodeType) == 4);
static_assert(sizeof(CUmem_advise) == 4);
static_assert(sizeof(CUstreamCaptureStatus) == 4);
static_assert(sizeof(CUstreamCaptureMode) == 4);
