// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the record of held processes a node reads at start (held_record.hpp). Any
// text is either refused with a reason or read; what is read is written back as the same record.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "held_record.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string why;
  const std::optional<tgs::cuda::node::held_entries> read = tgs::cuda::node::parse_held_record(text, why);
  if (!read) {
    if (why.empty()) std::abort();  // a refusal always says why
    return 0;
  }
  // Written back and read again: the same entries.
  std::string again_why;
  const auto again = tgs::cuda::node::parse_held_record(tgs::cuda::node::format_held_record(*read), again_why);
  if (!again || *again != *read) std::abort();
  for (const auto& [pid, start, cgroup] : *read) {
    if (pid <= 1 || (!cgroup.empty() && cgroup.front() != '/')) std::abort();
  }
  return 0;
}
