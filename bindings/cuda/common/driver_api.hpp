// SPDX-License-Identifier: Apache-2.0
/// @file
/// Prototypes of the driver functions the backend's own programs call directly (tgs-fake-train,
/// the tests, the benchmarks): the fake driver exports them all, the real driver too. Linked
/// programs call them by name, so an interposer loaded before the driver sees the calls.
#pragma once

#include <cstddef>

#include "cuda_subset.hpp"

extern "C" {
CUresult cuCtxGetCurrent(CUcontext* ctx);
CUresult cuCtxGetDevice(CUdevice* dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuDeviceGet(CUdevice* dev, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev);
CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice dev);
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status);
CUresult cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                  std::size_t ndeps, CUgraph child);
CUresult cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                 std::size_t ndeps, const CUDA_KERNEL_NODE_PARAMS_v2* params);
CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* child);
CUresult cuGraphCreate(CUgraph* graph, unsigned flags);
CUresult cuGraphDestroy(CUgraph graph);
CUresult cuGraphExecDestroy(CUgraphExec exec);
CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info);
CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, std::size_t* count);
CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags);
CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                      CUDA_GRAPH_INSTANTIATE_PARAMS* params);
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* params);
CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                               std::size_t log_size);
CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v2* params);
CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream);
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream);
CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type);
CUresult cuInit(unsigned flags);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shmem, CUstream s, void** params,
                        void** extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra);
CUresult cuMemAdvise_v2(CUdeviceptr ptr, std::size_t count, CUmem_advise advice,
                        CUmemLocation location);
CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes, CUstream stream);
CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytes, unsigned flags);
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes);
CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t bytes,
                     const CUmemAllocationProp* prop, unsigned long long flags);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes);
CUresult cuMemPrefetchAsync_v2(CUdeviceptr ptr, std::size_t count, CUmemLocation location,
                               unsigned flags, CUstream stream);
CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr ptr, std::size_t count, CUmemLocation location,
                                    unsigned flags, CUstream stream);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name);
CUresult cuModuleLoadData(CUmodule* module, const void* image);
CUresult cuStreamCreate(CUstream* stream, unsigned flags);
CUresult cuStreamDestroy_v2(CUstream stream);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status);
CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph);
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode);
CUresult cuEventCreate(CUevent* event, unsigned flags);
CUresult cuEventDestroy_v2(CUevent event);
CUresult cuEventRecord(CUevent event, CUstream stream);
CUresult cuEventQuery(CUevent event);
CUresult cuEventSynchronize(CUevent event);
}  // extern "C"
