// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: what the DRA plugin reads (dra_model.hpp). Any text, as a ResourceClaim from
// the API server, as a checkpoint and as tgs-node's feature file, is refused with a reason or
// read; a claim read is this node's and one device prepares or is refused; a checkpoint read is
// written back as the same checkpoint.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dra_model.hpp"

namespace dra = tgs::kubernetes::dra;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)dra::parse_node_features(text);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  static const tgs::kubernetes::inventory devices({.gpus = 2, .opportunistic_replicas = 2, .paths = {}});

  dra::claim_book book(devices);
  try {
    const auto found = dra::allocated_here(j, "u1", "n1");
    if (found.empty()) std::abort();  // none is a refusal, never an empty answer
    for (const dra::allocated_device& d : found) {
      if (d.pool != "n1") std::abort();
    }
    const dra::prepared_claim& c = book.prepare("u1", "ns", "c", found);
    if (found.size() != 1 || c.cdi_devices.size() != 2 || !devices.contains({c.gpu, c.cls, 0})) std::abort();
  } catch (const dra::claim_error& e) {
    if (std::string_view(e.what()).empty()) std::abort();
  }

  dra::claim_book loaded(devices);
  try {
    loaded.load(j);
  } catch (const std::runtime_error& e) {
    if (std::string_view(e.what()).empty() || loaded.size() != 0) std::abort();
    return 0;
  }
  dra::claim_book again(devices);
  again.load(loaded.to_json());
  if (again.to_json() != loaded.to_json()) std::abort();
  return 0;
}
