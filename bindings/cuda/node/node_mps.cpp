// SPDX-License-Identifier: Apache-2.0
// tgs-node and MPS: the control daemons (mps_daemons.hpp), the policy in force (an MPS policy
// where MPS is available, else the fallback), and the MPS client settings each job is told at
// registration.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "server_parts.hpp"

namespace tgs::cuda::node {

void node_server::start_mps() {
  mps_options mo = options_.mps;
  mo.allow_shared_folders = options_.allow_shared_folders;
  if (mo.runtime_dir.empty()) {
    mo.runtime_dir = std::filesystem::path(options_.socket_path).parent_path().string() + "/mps";
    if (mo.runtime_dir == "/mps") mo.runtime_dir = "./mps";
  }
  mps_ = std::make_unique<mps_daemons>(std::move(mo), options_.gpus, [this](mps_daemons::log_kind k, const std::string& m) {
    log(k == mps_daemons::log_kind::warn ? log_level::warn : log_level::info, "{}", m);
  });
  mps_->start([this](std::uint32_t gpu) {
    const gpu_observer::gpu_facts f = observer_.facts(gpu);
    return mps_gpu_facts{.present = f.present, .mig = f.mig, .uuid = f.uuid};
  });
  const any_rate_controller asked{options_.controller};
  const bool needs_mps = asked.traits().mechanism == sharing_mechanism::mps;
  if (needs_mps && !mps_->available_everywhere()) {
    const std::string why = mps_->why_unavailable();
    if (options_.policy_named || !options_.fallback_controller) {
      throw std::runtime_error("--policy " + std::string(asked.policy_name()) +
                               " shares the GPU through MPS, which this node does not have: " + why +
                               " (--mps managed starts the daemons; docs/operator-guide.md, \"MPS\")");
    }
    options_.controller = *options_.fallback_controller;
    policy_fallback_ = fmt::format("{} needs MPS: {}", asked.policy_name(), why);
    log(log_level::warn, "policy {} instead of the default {}: MPS is not available ({})",
        any_rate_controller{options_.controller}.policy_name(), asked.policy_name(), why);
  }
  any_rate_controller in_force{options_.controller};
  if (!options_.fault_policy_named) {
    // Clients of one MPS server share a fault domain (measured: docs/results/mps-faults.md); a
    // bare exit still ends no one by the node's hand (the policy's default), the GPU does that.
    if (in_force.traits().mechanism == sharing_mechanism::mps) {
      options_.fault_policy = shared_fault_domain::config{};
    } else {
      options_.fault_policy = separate_contexts::config{};
    }
  }
  if (in_force.traits().mechanism == sharing_mechanism::mps) {
    // The policy's MPS partition, from its first decision: fixed for every job the node serves.
    const rate_decision d = in_force.step(rate_observation{});
    if (const auto* p = std::get_if<mps_partition>(&d.share)) mps_share_ = *p;
  }
}

abi::mps_client node_server::mps_client_for(job_class cls, std::uint32_t gpu) const {
  abi::mps_client m;
  if (!mps_share_ || !mps_ || !mps_->available(gpu)) return m;
  const std::string dir = mps_->pipe_dir(gpu);
  if (dir.empty() || dir.size() >= sizeof(m.pipe_directory)) return m;
  m.client = 1;
  std::memcpy(m.pipe_directory, dir.data(), dir.size());
  const bool opportunistic = cls == job_class::opportunistic;
  m.priority = opportunistic && mps_share_->opportunistic_below_normal ? 1 : 0;
  const double share = opportunistic ? mps_share_->opportunistic_threads : mps_share_->production_threads;
  const long percent = std::lround(std::clamp(share, 0.01, 1.0) * 100.0);
  m.active_thread_percentage = percent >= 100 ? 0 : static_cast<std::uint8_t>(std::max(1L, percent));
  return m;
}

}  // namespace tgs::cuda::node
