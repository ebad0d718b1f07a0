// SPDX-License-Identifier: Apache-2.0
// The graph walker: blocks per executable graph, counted at instantiation and kept until the
// executable graph is destroyed.
#include "graphs.hpp"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "launch_gate.hpp"
#include "resolve.hpp"

namespace tgs::cuda::intercept {

namespace {

std::mutex graph_mutex;
/// Blocks per executable graph. Heap-allocated and never destroyed: a launch may come from
/// another library's exit handler after this library's destructors ran.
std::unordered_map<CUgraphExec, std::uint64_t>* graph_table = nullptr;

const graph_api& graphs() noexcept {
  static const graph_api api = [] {
    graph_api a;
    a.get_nodes = driver_fn<decltype(a.get_nodes)>("cuGraphGetNodes");
    a.node_type = driver_fn<decltype(a.node_type)>("cuGraphNodeGetType");
    a.kernel_params = driver_fn<decltype(a.kernel_params)>("cuGraphKernelNodeGetParams_v2");
    a.child_graph = driver_fn<decltype(a.child_graph)>("cuGraphChildGraphNodeGetGraph");
    return a;
  }();
  return api;
}

/// The thread blocks of `graph`'s kernel nodes, child graphs included (up to 8 levels deep).
std::uint64_t count_graph_blocks(CUgraph graph, int depth) noexcept {
  const graph_api& api = graphs();
  if (depth > 8 || api.get_nodes == nullptr || api.node_type == nullptr || api.kernel_params == nullptr) return 0;
  std::size_t n = 0;
  if (api.get_nodes(graph, nullptr, &n) != CUDA_SUCCESS || n == 0) return 0;
  std::vector<CUgraphNode> nodes;
  try {
    nodes.resize(n);
  } catch (...) {
    return 0;
  }
  if (api.get_nodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return 0;
  std::uint64_t blocks = 0;
  for (std::size_t i = 0; i < n && i < nodes.size(); ++i) {
    CUgraphNodeType type{};
    if (nodes[i] == nullptr || api.node_type(nodes[i], &type) != CUDA_SUCCESS) continue;
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
      CUDA_KERNEL_NODE_PARAMS_v2 params{};
      if (api.kernel_params(nodes[i], &params) == CUDA_SUCCESS) {
        blocks = add_blocks(blocks, grid_blocks(params.gridDimX, params.gridDimY, params.gridDimZ));
      }
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH && api.child_graph != nullptr) {
      CUgraph child = nullptr;
      if (api.child_graph(nodes[i], &child) == CUDA_SUCCESS && child != nullptr) {
        blocks = add_blocks(blocks, count_graph_blocks(child, depth + 1));
      }
    }
  }
  return blocks;
}

}  // namespace

std::uint64_t graph_blocks(CUgraphExec exec) noexcept {
  try {
    std::lock_guard lock(graph_mutex);
    if (graph_table == nullptr) return 0;
    const auto it = graph_table->find(exec);
    return it == graph_table->end() ? 0 : it->second;
  } catch (...) {
    return 0;
  }
}

void record_graph(CUresult r, const CUgraphExec* exec, CUgraph graph) noexcept {
  if (r != CUDA_SUCCESS || exec == nullptr || *exec == nullptr) return;
  const std::uint64_t blocks = count_graph_blocks(graph, 0);
  try {
    std::lock_guard lock(graph_mutex);
    if (graph_table == nullptr) graph_table = new std::unordered_map<CUgraphExec, std::uint64_t>();
    (*graph_table)[*exec] = blocks;
  } catch (...) {
    // Out of host memory: its launches count 0 blocks, as before this was counted.
  }
}

void forget_graph(CUresult r, CUgraphExec exec) noexcept {
  if (r != CUDA_SUCCESS) return;
  try {
    std::lock_guard lock(graph_mutex);
    if (graph_table != nullptr) graph_table->erase(exec);
  } catch (...) {
  }
}

}  // namespace tgs::cuda::intercept
