// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the job profiles a node reads at start (job_profiles.hpp). Any text is either
// refused with a reason or read; what is read is within the store's bounds and is written back
// as a text that reads as the same store.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "job_profiles.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string why;
  const auto read = tgs::cuda::node::parse_profiles(text, why);
  if (!read) {
    if (why.empty()) std::abort();  // a refusal always says why
    return 0;
  }
  if (read->size() > 4096) std::abort();
  const std::string written = tgs::cuda::node::format_profiles(*read);
  std::string again_why;
  const auto again = tgs::cuda::node::parse_profiles(written, again_why);
  if (!again || tgs::cuda::node::format_profiles(*again) != written) std::abort();
  return 0;
}
