// SPDX-License-Identifier: Apache-2.0
/// @file
/// `gpu_memory_loop`: tgs-node's driver of one GPU's memory policy. It observes the jobs' memory
/// through their shared-memory segments, steps the policy on every allocation request, arrival,
/// departure and periodic tick, and writes what the policy decided back: the opportunistic jobs'
/// resident limits (their interposers evict and restore to meet them) and every job's view of
/// its budget (what `cuMemGetInfo` answers).
///
/// The policy decides; this loop only carries the decision to the segments. Like
/// `gpu_control_loop` it owns no clock and no socket, so tests drive it with plain segments.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "node_abi.hpp"
#include "tgs/core/units.hpp"
#include "tgs/memory/concepts.hpp"
#include "tgs/memory/hard_limit.hpp"
#include "tgs/memory/residency.hpp"

namespace tgs::cuda::node {

/// Drives one GPU's `Policy` against the jobs' segments.
///
/// ```cpp
/// gpu_memory_loop<tgs::transparent_unified_memory> loop{tgs::transparent_unified_memory{{}}, 24_GiB};
/// loop.add_job(1, tgs::job_class::production, segment, now);
/// tgs::allocation_verdict v = loop.request(1, 2_GiB, abi::allocation_path::convertible, now);
/// ```
template <MemoryPolicy Policy>
class gpu_memory_loop {
 public:
  /// `split`: how each job's interposer shares its resident limit among its allocations
  /// (`tgs::plan_residency`), written to every job's segment.
  gpu_memory_loop(Policy policy, bytes budget, residency_split split = residency_split::in_order)
      : policy_(std::move(policy)), budget_(budget), split_(split) {}

  /// Adds a job; the policy is stepped at once so its limit and view are in place before the
  /// job's first allocation.
  void add_job(std::uint32_t id, job_class cls, abi::job_segment* segment, instant now) {
    segment->resident_limit.store(abi::no_resident_limit, std::memory_order_relaxed);
    segment->residency_split.store(static_cast<std::uint32_t>(split_), std::memory_order_relaxed);
    segment->memory_policy_active.store(1, std::memory_order_release);
    jobs_.push_back({id, cls, segment});
    apply(policy_.step(observe(now, std::nullopt)));
  }

  /// Removes a job: its memory no longer counts, so the others' limits rise at once.
  void remove_job(std::uint32_t id, instant now) {
    std::erase_if(jobs_, [id](const job& j) { return j.id == id; });
    apply(policy_.step(observe(now, std::nullopt)));
  }

  /// Rules on an allocation of `size` bytes by job `id` and applies the decision (a production
  /// allocation may lower the opportunistic jobs' limits in the same step).
  allocation_verdict request(std::uint32_t id, bytes size, abi::allocation_path path, instant now) {
    const auto it = std::find_if(jobs_.begin(), jobs_.end(), [id](const job& j) { return j.id == id; });
    if (it == jobs_.end()) return allocation_verdict::grant_device;
    allocation_request req{it->cls, size};
    req.movable = path == abi::allocation_path::convertible || path == abi::allocation_path::managed;
    const memory_decision d = policy_.step(observe(now, req));
    apply(d);
    const allocation_verdict verdict = d.verdict.value_or(allocation_verdict::grant_device);
    // A job's own managed allocation stays managed whatever the policy would have chosen. (A
    // fixed path is never granted managed: the MemoryPolicy concept rules that out.)
    if (path == abi::allocation_path::managed && verdict == allocation_verdict::grant_device) {
      return allocation_verdict::grant_managed;
    }
    return verdict;
  }

  /// Re-observes (frees and evictions change the footprints between requests) and applies.
  void run(instant now) { apply(policy_.step(observe(now, std::nullopt))); }

  /// Whether every opportunistic job is within its resident limit (evictions done).
  [[nodiscard]] bool settled() const noexcept {
    return std::all_of(jobs_.begin(), jobs_.end(), [](const job& j) {
      return j.segment->managed_resident_bytes.load(std::memory_order_acquire) <=
             j.segment->resident_limit.load(std::memory_order_acquire);
    });
  }

  /// The limit on the opportunistic jobs' resident memory (all of them together).
  [[nodiscard]] bytes opportunistic_resident_limit() const noexcept { return limit_; }
  [[nodiscard]] bytes budget() const noexcept { return budget_; }
  [[nodiscard]] residency_split split() const noexcept { return split_; }
  [[nodiscard]] const Policy& policy() const noexcept { return policy_; }
  [[nodiscard]] std::size_t job_count() const noexcept { return jobs_.size(); }

 private:
  struct job {
    std::uint32_t id;
    job_class cls;
    abi::job_segment* segment;
  };

  /// Bytes a job holds: device, physical and managed memory, wherever it lives.
  static bytes allocated(const abi::job_segment& s) noexcept {
    return bytes{s.device_bytes.load(std::memory_order_acquire) + s.managed_bytes.load(std::memory_order_acquire)};
  }
  /// Of those, bytes on the GPU: device memory is always there; managed memory unless evicted.
  static bytes resident(const abi::job_segment& s) noexcept {
    const std::uint64_t managed = s.managed_bytes.load(std::memory_order_acquire);
    const std::uint64_t managed_resident =
        std::min(managed, s.managed_resident_bytes.load(std::memory_order_acquire));
    return bytes{s.device_bytes.load(std::memory_order_acquire) + managed_resident};
  }

  memory_observation observe(instant now, std::optional<allocation_request> request) const noexcept {
    memory_observation obs;
    obs.now = now;
    obs.capacity = budget_;
    obs.request = request;
    for (const job& j : jobs_) {
      std::optional<job_memory>& side = j.cls == job_class::production ? obs.production : obs.opportunistic;
      if (!side) side = job_memory{};
      side->allocated += allocated(*j.segment);
      side->resident += resident(*j.segment);
    }
    return obs;
  }

  /// Writes the decision: each opportunistic job's share of the resident limit (in proportion to
  /// what it holds, so the shares add up to the limit), and every job's view of its budget.
  void apply(const memory_decision& d) noexcept {
    limit_ = d.opportunistic_resident_limit;
    // Device memory of opportunistic jobs cannot be evicted: only their managed memory is capped.
    std::uint64_t opp_device = 0;
    std::uint64_t opp_managed = 0;
    std::uint64_t all_resident = 0;
    for (const job& j : jobs_) {
      all_resident += resident(*j.segment).count();
      if (j.cls != job_class::opportunistic) continue;
      opp_device += j.segment->device_bytes.load(std::memory_order_acquire);
      opp_managed += j.segment->managed_bytes.load(std::memory_order_acquire);
    }
    const bool capped = limit_ != bytes::max();
    const std::uint64_t managed_limit = capped ? (limit_ - bytes{opp_device}).count() : abi::no_resident_limit;
    for (const job& j : jobs_) {
      abi::job_segment& s = *j.segment;
      std::uint64_t limit = abi::no_resident_limit;
      if (j.cls == job_class::opportunistic && capped) {
        const std::uint64_t mine = s.managed_bytes.load(std::memory_order_acquire);
        limit = opp_managed == 0 ? managed_limit
                                 : static_cast<std::uint64_t>(static_cast<long double>(managed_limit) *
                                                              static_cast<long double>(mine) /
                                                              static_cast<long double>(opp_managed));
      }
      if (s.resident_limit.exchange(limit, std::memory_order_acq_rel) != limit) {
        s.memory_generation.fetch_add(1, std::memory_order_release);
        // Not FUTEX_PRIVATE: the evictor waiting on it is in the job's process.
        ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&s.memory_generation), FUTEX_WAKE, INT_MAX, nullptr,
                  nullptr, 0);
      }
      // The view: the budget (or the job's own limit where the policy has one), and what other
      // jobs occupy of it now. Conservative for a production job under tgs, which could displace
      // opportunistic memory; the interposer also caps it by the driver's own answer.
      bytes total = budget_;
      bytes others = bytes{all_resident} - resident(s);
      if (const auto* hard = policy_target<hard_limit>()) {
        total = hard->limit(j.cls, budget_);
        others = bytes{};
      }
      s.view_total_bytes.store(total.count(), std::memory_order_relaxed);
      s.view_others_bytes.store(others.count(), std::memory_order_relaxed);
    }
  }

  /// The held policy as `P`, when it is one (through `any_memory_policy`, or `Policy` itself).
  template <typename P>
  [[nodiscard]] const P* policy_target() const noexcept {
    if constexpr (std::is_same_v<Policy, P>) {
      return &policy_;
    } else if constexpr (requires { policy_.template target<P>(); }) {
      return policy_.template target<P>();
    } else {
      return nullptr;
    }
  }

  Policy policy_;
  bytes budget_;
  residency_split split_;
  bytes limit_ = bytes::max();
  std::vector<job> jobs_;
};

}  // namespace tgs::cuda::node
