// SPDX-License-Identifier: Apache-2.0
/// @file
/// The body of the node protocol fuzzer: one input is a client's message and then the values a
/// job writes into its segment, step after step. The message goes through the node's parser
/// (`parse_message`), the values through the node's control and memory loops beside an honest
/// job, and the node's promises are checked: nothing a job writes is believed beyond what the
/// node granted it, and the honest job's limit falls by no more than that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "control_loop.hpp"
#include "memory_loop.hpp"
#include "protocol.hpp"
#include "tgs/memory/transparent_unified_memory.hpp"
#include "tgs/rate/tgs_rate_control.hpp"

namespace tgs::cuda::fuzz {

/// Reads the input front to back; past its end every read is 0.
class input {
 public:
  input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint64_t u64() {
    std::uint64_t v = 0;
    const std::size_t n = std::min<std::size_t>(sizeof(v), size_ - at_);
    if (n > 0) std::memcpy(&v, data_ + at_, n);
    at_ += n;
    return v;
  }
  std::uint8_t u8() { return at_ < size_ ? data_[at_++] : 0; }
  [[nodiscard]] bool done() const { return at_ >= size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

/// A finding: abort, which libFuzzer and the corpus test both report.
inline void require(bool ok) {
  if (!ok) std::abort();
}

/// One message: parsed, and a registration's name written as a JSON value the way the status does.
inline void run_message(const std::uint8_t* data, std::size_t size) {
  const node::parsed_message m = node::parse_message(data, size);
  if (m.kind == node::message_kind::register_job) {
    const std::string name(m.registration.name, strnlen(m.registration.name, sizeof(m.registration.name)));
    const nlohmann::ordered_json line{{"name", name}, {"class", "opportunistic"}};
    const std::string text = line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    const nlohmann::json back = nlohmann::json::parse(text);
    require(back["class"] == "opportunistic" && back.size() == 2);
  }
}

/// The segment values of a job that writes whatever it likes, stepped through both loops.
inline void run_segment(input& in) {
  using namespace std::chrono_literals;
  constexpr std::uint64_t gib = 1ULL << 30;
  const bool forger_is_production = (in.u8() & 1) != 0;
  const job_class forger_class = forger_is_production ? job_class::production : job_class::opportunistic;
  auto honest = std::make_unique<abi::job_segment>();
  auto forger = std::make_unique<abi::job_segment>();
  instant t = epoch;

  node::gpu_memory_loop<transparent_unified_memory> memory{transparent_unified_memory{{.reserve = bytes{}}},
                                                          bytes{16 * gib}};
  memory.add_job(1, job_class::opportunistic, honest.get(), t);
  require(memory.request(1, bytes{8 * gib}, abi::allocation_path::convertible, t) == allocation_verdict::grant_managed);
  honest->managed_bytes = 8 * gib;
  honest->managed_resident_bytes = 8 * gib;
  memory.add_job(2, forger_class, forger.get(), t);

  tgs_rate_control::config cfg;
  cfg.production_window = 10ms;
  cfg.profile_windows = 2;
  node::gpu_control_loop<tgs_rate_control> rate{tgs_rate_control{cfg}, t};
  rate.add_job(1, job_class::opportunistic, honest.get(), t);
  rate.add_job(2, forger_class, forger.get(), t);

  std::uint64_t granted = 0;
  for (int step = 0; step < 16 && !in.done(); ++step) {
    t += std::chrono::milliseconds{1 + in.u8()};
    // What the job may ask for: any size and path; the policy rules.
    if ((in.u8() & 3) == 0) {
      const std::uint64_t size = in.u64() % (32 * gib);
      const auto path = static_cast<abi::allocation_path>(in.u8());
      if (memory.request(2, bytes{size}, path, t) != allocation_verdict::deny_out_of_memory) granted += size;
    }
    // What the job writes into its own lines, and into the node's.
    forger->launch_counter.store(in.u64());
    forger->device_bytes.store(in.u64());
    forger->managed_bytes.store(in.u64());
    forger->managed_resident_bytes.store(in.u64());
    forger->sync_wait_ns.store(in.u64());
    forger->timed_launches.store(in.u64());
    forger->timed_launch_ns.store(in.u64());
    forger->allowance.store(in.u64());
    forger->resident_limit.store(in.u64());
    honest->launch_counter.fetch_add(abi::pack_launch(1000));
    memory.run(t);
    (void)rate.run(t, 0);

    const std::optional<abi::job_holdings> counted = memory.counted(2);
    require(counted.has_value());
    require(counted->device_bytes + counted->managed_bytes <= granted);
    require(counted->managed_resident_bytes <= counted->managed_bytes);
    const std::uint64_t limit = honest->resident_limit.load();
    if (forger_is_production) {
      // The honest job loses at most what the forger was granted.
      require(granted >= 16 * gib || limit >= 16 * gib - granted);
    } else {
      require(limit == abi::no_resident_limit);
    }
    for (const node::job_report& r : rate.report()) {
      require(r.sync_wait_fraction >= 0.0 && r.sync_wait_fraction <= 1.0 + 1e-9);
      require(!r.launch_call_us || *r.launch_call_us >= 0.0);
    }
  }
}

/// The whole input: its first byte says how long the message is, the rest drives the segment.
inline void run(const std::uint8_t* data, std::size_t size) {
  const std::size_t message = size == 0 ? 0 : std::min<std::size_t>(data[0] * 2U, size - 1);
  run_message(data + (size == 0 ? 0 : 1), message);
  input rest(data + (size == 0 ? 0 : 1 + message), size == 0 ? 0 : size - 1 - message);
  run_segment(rest);
}

}  // namespace tgs::cuda::fuzz
