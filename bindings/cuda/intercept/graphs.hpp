// SPDX-License-Identifier: Apache-2.0
/// @file
/// CUDA graphs: an executable graph's thread blocks, counted once when it is instantiated or
/// updated, so each launch of it passes the rate gate with all of its blocks.
///
/// A graph launch counts one launch and the blocks of the graph's kernel nodes, child graphs
/// included (up to 8 levels). Per-node changes of an executable graph
/// (`cuGraphExecKernelNodeSetParams`) keep the instantiation's count.
#pragma once

#include <cstdint>

#include "cuda_subset.hpp"

namespace tgs::cuda::intercept {

/// The graph entry points the walk uses (not hooked: looked up in the driver itself).
struct graph_api {
  CUresult (*get_nodes)(CUgraph, CUgraphNode*, std::size_t*) = nullptr;
  CUresult (*node_type)(CUgraphNode, CUgraphNodeType*) = nullptr;
  CUresult (*kernel_params)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*) = nullptr;
  CUresult (*child_graph)(CUgraphNode, CUgraph*) = nullptr;
};

/// `a + b`, saturating: a count that wrapped would let a huge graph through as a small one.
constexpr std::uint64_t add_blocks(std::uint64_t a, std::uint64_t b) noexcept {
  return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

/// A graph launch's blocks: what its instantiation counted, 0 for an unknown executable graph.
[[nodiscard]] std::uint64_t graph_blocks(CUgraphExec exec) noexcept;
/// Counts the blocks of an executable graph just instantiated (or updated) from `graph`.
void record_graph(CUresult r, const CUgraphExec* exec, CUgraph graph) noexcept;
/// Forgets a destroyed executable graph.
void forget_graph(CUresult r, CUgraphExec exec) noexcept;

}  // namespace tgs::cuda::intercept
