// SPDX-License-Identifier: Apache-2.0
// What tgs-node offers on its node, as a Node Feature Discovery local feature file
// (`--node-features-file`, e.g. /etc/kubernetes/node-feature-discovery/features.d/tgs): NFD's
// worker reads it and labels the node `feature.node.kubernetes.io/tgs.*`, so schedulers and users
// can select the nodes where tgs shares GPUs, and those where MPS is up. The node rewrites it
// whenever what it offers changes (an MPS daemon that died and waits to start again, say) and
// removes it when it stops: a node without tgs-node running offers none of it.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "safe_dir.hpp"
#include "server_parts.hpp"
#include "tgs/version.hpp"

namespace tgs::cuda::node {

namespace {

/// `text` as a Kubernetes label value: at most 63 of [A-Za-z0-9._-], starting and ending with a
/// letter or digit (anything else becomes '-', and the ends are trimmed).
std::string label_value(std::string_view text) {
  std::string out;
  for (const char c : text.substr(0, 63)) {
    out += std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-' ? c : '-';
  }
  const auto edge = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) == 0; };
  while (!out.empty() && edge(out.back())) out.pop_back();
  out.erase(out.begin(), std::find_if_not(out.begin(), out.end(), edge));
  return out;
}

}  // namespace

std::uint32_t node_server::mps_gpus_available() const {
  std::uint32_t n = 0;
  for (std::uint32_t gpu = 0; gpu < options_.gpus; ++gpu) n += mps_ && mps_->available(gpu) ? 1U : 0U;
  return n;
}

std::string node_server::node_features_text() const {
  const any_rate_controller sample{options_.controller};
  const std::uint32_t mps_gpus = mps_gpus_available();
  std::string text =
      "# tgs-node: what transparent GPU sharing offers on this node, for Node Feature Discovery's local\n"
      "# source (labels feature.node.kubernetes.io/tgs.*). Rewritten when it changes; removed when\n"
      "# tgs-node stops.\n";
  const auto line = [&](std::string_view key, std::string_view value) {
    text += fmt::format("{}={}\n", key, label_value(value));
  };
  line("tgs.version", TGS_VERSION);
  line("tgs.gpus", std::to_string(options_.gpus));
  // Every GPU the node serves offers both classes; class sockets are how containers reach them.
  line("tgs.production", "true");
  line("tgs.opportunistic", "true");
  line("tgs.class-sockets", options_.class_socket_dir.empty() ? "false" : "true");
  line("tgs.mps", mps_gpus > 0 && mps_gpus == options_.gpus ? "true" : "false");
  line("tgs.mps.gpus", std::to_string(mps_gpus));
  line("tgs.policy", sample.policy_name());
  line("tgs.memory-policy",
       options_.memory_policy ? std::string(any_memory_policy{*options_.memory_policy}.policy_name()) : "off");
  line("tgs.opportunistic-mechanism", to_string(options_.opportunistic_mechanism));
  return text;
}

void node_server::sync_node_features() {
  if (options_.node_features_path.empty()) return;
  const std::string text = node_features_text();
  if (text == written_features_) return;
  const std::string& path = options_.node_features_path;
  const auto [folder_path, name] = containers::split_path(path);
  const containers::unique_fd folder(::open(folder_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  const std::string why = folder.get() < 0 ? "cannot open its folder: " + std::string(std::strerror(errno))
                                           : containers::replace_file_at(folder.get(), name, text, 0644);
  if (!why.empty()) {
    // Said once per reason; tried again at the next change and at every turn of the loop until then.
    if (why != features_trouble_) log(log_level::error, "cannot write the node features file {}: {}", path, why);
    features_trouble_ = why;
    return;
  }
  features_trouble_.clear();
  written_features_ = text;
  log(log_level::info, "node features written to {} (MPS on {} of {} GPU(s))", path, mps_gpus_available(),
      options_.gpus);
}

void node_server::remove_node_features() {
  if (options_.node_features_path.empty() || written_features_.empty()) return;
  if (::unlink(options_.node_features_path.c_str()) != 0 && errno != ENOENT) {
    log(log_level::warn, "cannot remove the node features file {}: {}", options_.node_features_path,
        std::strerror(errno));
    return;
  }
  written_features_.clear();
  log(log_level::info, "node features file {} removed", options_.node_features_path);
}

}  // namespace tgs::cuda::node
