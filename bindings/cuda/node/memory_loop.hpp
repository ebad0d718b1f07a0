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
///
/// What a job writes into its segment is a claim, not a fact (docs/trust-model.md): the loop
/// believes a job's bytes only up to what it was believed to hold plus the allocations the policy
/// granted it since, so a job that reports more than it asked for cannot make the policy evict
/// or refuse anyone else.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "node_abi.hpp"
#include "tgs/core/units.hpp"
#include "tgs/memory/concepts.hpp"
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
  /// How long a granted allocation may take to show in the job's segment before the grant no
  /// longer backs what the job reports (a managed allocation is placed and populated first,
  /// which takes seconds for GiBs).
  static constexpr duration grant_window = std::chrono::seconds{10};

  /// `split`: how each job's interposer shares its resident limit among its allocations
  /// (`tgs::plan_residency`), written to every job's segment. `eviction_stall`: how long an
  /// opportunistic job over its limit may go without moving anything to host before the node
  /// stops waiting for it (see `settled`).
  gpu_memory_loop(Policy policy, bytes budget, residency_split split = residency_split::in_order,
                  duration eviction_stall = std::chrono::seconds{1})
      : policy_(std::move(policy)), budget_(budget), split_(split), eviction_stall_(eviction_stall) {}

  /// Adds a job that holds `holdings` (a job registering again with a restarted node; already
  /// bounded by the caller), which is all it is believed to hold until the node grants it more.
  /// The policy is stepped at once so its limit and view are in place before the job's first
  /// allocation.
  void add_job(std::uint32_t id, job_class cls, abi::job_segment* segment, instant now,
               const abi::job_holdings& holdings = {}) {
    segment->resident_limit.store(abi::no_resident_limit, std::memory_order_relaxed);
    segment->residency_split.store(static_cast<std::uint32_t>(split_), std::memory_order_relaxed);
    segment->memory_policy_active.store(1, std::memory_order_release);
    job j{id, cls, segment};
    j.counted = saturating_add(holdings.device_bytes, holdings.managed_bytes);
    j.last_progress = now;
    jobs_.push_back(j);
    account(now);
    apply(policy_.step(observe(now, std::nullopt)), now);
  }

  /// Removes a job: its memory no longer counts, so the others' limits rise at once.
  void remove_job(std::uint32_t id, instant now) {
    std::erase_if(jobs_, [id](const job& j) { return j.id == id; });
    account(now);
    apply(policy_.step(observe(now, std::nullopt)), now);
  }

  /// Rules on an allocation of `size` bytes by job `id` and applies the decision (a production
  /// allocation may lower the opportunistic jobs' limits in the same step). A grant lets the
  /// job's reported bytes grow by `size` within `grant_window`.
  allocation_verdict request(std::uint32_t id, bytes size, abi::allocation_path path, instant now) {
    const auto it = std::find_if(jobs_.begin(), jobs_.end(), [id](const job& j) { return j.id == id; });
    if (it == jobs_.end()) return allocation_verdict::grant_device;
    account(now);
    allocation_request req{it->cls, size};
    req.movable = path == abi::allocation_path::convertible || path == abi::allocation_path::managed;
    const memory_decision d = policy_.step(observe(now, req));
    apply(d, now);
    allocation_verdict verdict = d.verdict.value_or(allocation_verdict::grant_device);
    // A job's own managed allocation stays managed whatever the policy would have chosen. (A
    // fixed path is never granted managed: the MemoryPolicy concept rules that out.)
    if (path == abi::allocation_path::managed && verdict == allocation_verdict::grant_device) {
      verdict = allocation_verdict::grant_managed;
    }
    if (verdict != allocation_verdict::deny_out_of_memory) {
      // Grants within a second of each other share an entry: a job that allocates and frees
      // thousands of times a second (between two observations) keeps a list of about ten, and
      // a grant lives up to a second longer than `grant_window`.
      if (!it->grants.empty() && now - it->grants.back().at < std::chrono::seconds{1}) {
        it->grants.back().bytes = saturating_add(it->grants.back().bytes, size.count());
      } else {
        it->grants.push_back({now, size.count()});
      }
    }
    return verdict;
  }

  /// Re-observes (frees and evictions change the footprints between requests) and applies.
  void run(instant now) {
    account(now);
    apply(policy_.step(observe(now, std::nullopt)), now);
  }

  /// Whether a held-back allocation may be answered: every opportunistic job is within its
  /// resident limit (evictions done), or has moved nothing for `eviction_stall` (it will not, and
  /// the allocation must not wait out the whole eviction wait for it; the driver still evicts
  /// its pages under pressure).
  [[nodiscard]] bool settled() const noexcept {
    return std::all_of(jobs_.begin(), jobs_.end(), [](const job& j) {
      return j.stalled || clamp(j).managed_resident_bytes <= j.segment->resident_limit.load(std::memory_order_acquire);
    });
  }

  /// What the node counts for job `id` (its reports, bounded by its grants); empty if unknown.
  [[nodiscard]] std::optional<abi::job_holdings> counted(std::uint32_t id) const noexcept {
    for (const job& j : jobs_) {
      if (j.id == id) return clamp(j);
    }
    return std::nullopt;
  }
  /// Whether job `id` is over its limit and has stopped moving (see `settled`).
  [[nodiscard]] bool stalled(std::uint32_t id) const noexcept {
    return std::any_of(jobs_.begin(), jobs_.end(), [id](const job& j) { return j.id == id && j.stalled; });
  }

  /// The limit on the opportunistic jobs' resident memory (all of them together).
  [[nodiscard]] bytes opportunistic_resident_limit() const noexcept { return limit_; }
  [[nodiscard]] bytes budget() const noexcept { return budget_; }
  [[nodiscard]] residency_split split() const noexcept { return split_; }
  [[nodiscard]] const Policy& policy() const noexcept { return policy_; }
  [[nodiscard]] std::size_t job_count() const noexcept { return jobs_.size(); }

 private:
  struct grant {
    instant at;
    std::uint64_t bytes;
  };
  struct job {
    std::uint32_t id;
    job_class cls;
    abi::job_segment* segment;
    /// Bytes (device and managed) the node believes the job holds: what it reported, never more
    /// than it was believed to hold before plus the grants since.
    std::uint64_t counted = 0;
    /// Grants not yet seen in the job's reports, dropped after `grant_window`.
    std::vector<grant> grants = {};
    std::uint64_t last_resident = 0;
    instant last_progress = epoch;
    bool stalled = false;
  };

  static constexpr std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
  }
  static std::uint64_t pending(const job& j) noexcept {
    std::uint64_t sum = 0;
    for (const grant& g : j.grants) sum = saturating_add(sum, g.bytes);
    return sum;
  }

  /// What the job's segment says, bounded: everything it reports together never exceeds what it
  /// was believed to hold plus the grants it has not used yet, managed bytes on the GPU never
  /// exceed its managed bytes. A job that writes larger numbers into its own segment changes
  /// nothing for the others.
  static abi::job_holdings clamp(const job& j) noexcept {
    const abi::job_segment& s = *j.segment;
    const std::uint64_t ceiling = saturating_add(j.counted, pending(j));
    abi::job_holdings h;
    h.device_bytes = std::min(s.device_bytes.load(std::memory_order_acquire), ceiling);
    h.managed_bytes = std::min(s.managed_bytes.load(std::memory_order_acquire), ceiling - h.device_bytes);
    h.managed_resident_bytes = std::min(h.managed_bytes, s.managed_resident_bytes.load(std::memory_order_acquire));
    return h;
  }
  static bytes allocated(const abi::job_holdings& h) noexcept { return bytes{h.device_bytes + h.managed_bytes}; }
  /// Of those, bytes on the GPU: device memory is always there; managed memory unless evicted.
  static bytes resident(const abi::job_holdings& h) noexcept { return bytes{h.device_bytes + h.managed_resident_bytes}; }

  /// Takes in what every job reports now: grows `counted` by the grants it used (oldest first),
  /// drops expired grants, and follows each opportunistic job's progress toward its limit.
  void account(instant now) noexcept {
    for (job& j : jobs_) {
      std::erase_if(j.grants, [&](const grant& g) { return now - g.at > grant_window; });
      const abi::job_holdings h = clamp(j);
      const std::uint64_t total = h.device_bytes + h.managed_bytes;
      std::uint64_t used = total > j.counted ? total - j.counted : 0;
      for (grant& g : j.grants) {
        const std::uint64_t take = std::min(used, g.bytes);
        g.bytes -= take;
        used -= take;
      }
      std::erase_if(j.grants, [](const grant& g) { return g.bytes == 0; });
      j.counted = total;
      const std::uint64_t limit = j.segment->resident_limit.load(std::memory_order_acquire);
      if (h.managed_resident_bytes <= limit || h.managed_resident_bytes < j.last_resident) {
        j.last_progress = now;
        j.stalled = false;
      } else if (now - j.last_progress >= eviction_stall_) {
        j.stalled = true;
      }
      j.last_resident = h.managed_resident_bytes;
    }
  }

  memory_observation observe(instant now, std::optional<allocation_request> request) const noexcept {
    memory_observation obs;
    obs.now = now;
    obs.capacity = budget_;
    obs.request = request;
    for (const job& j : jobs_) {
      std::optional<job_memory>& side = j.cls == job_class::production ? obs.production : obs.opportunistic;
      if (!side) side = job_memory{};
      const abi::job_holdings h = clamp(j);
      side->allocated += allocated(h);
      side->resident += resident(h);
    }
    return obs;
  }

  /// Writes the decision: each opportunistic job's share of the resident limit (in proportion to
  /// what it holds, so the shares add up to the limit), and every job's view of its budget.
  void apply(const memory_decision& d, instant now) noexcept {
    limit_ = d.opportunistic_resident_limit;
    // Device memory of opportunistic jobs cannot be evicted: only their managed memory is capped.
    std::uint64_t opp_device = 0;
    std::uint64_t opp_managed = 0;
    std::uint64_t all_resident = 0;
    for (const job& j : jobs_) {
      const abi::job_holdings h = clamp(j);
      all_resident = saturating_add(all_resident, resident(h).count());
      if (j.cls != job_class::opportunistic) continue;
      opp_device = saturating_add(opp_device, h.device_bytes);
      opp_managed = saturating_add(opp_managed, h.managed_bytes);
    }
    const bool capped = limit_ != bytes::max();
    const std::uint64_t managed_limit = capped ? (limit_ - bytes{opp_device}).count() : abi::no_resident_limit;
    for (job& j : jobs_) {
      abi::job_segment& s = *j.segment;
      const abi::job_holdings h = clamp(j);
      std::uint64_t limit = abi::no_resident_limit;
      if (j.cls == job_class::opportunistic && capped) {
        limit = opp_managed == 0 ? managed_limit
                                 : static_cast<std::uint64_t>(static_cast<long double>(managed_limit) *
                                                              static_cast<long double>(h.managed_bytes) /
                                                              static_cast<long double>(opp_managed));
      }
      if (s.resident_limit.exchange(limit, std::memory_order_acq_rel) != limit) {
        // A new limit starts the clock of a job that has been moving (a stalled one stays stalled
        // until it moves: a lower limit is not a reason to wait for it again).
        if (!j.stalled) j.last_progress = now;
        s.memory_generation.fetch_add(1, std::memory_order_release);
        // Not FUTEX_PRIVATE: the evictor waiting on it is in the job's process.
        ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&s.memory_generation), FUTEX_WAKE, INT_MAX, nullptr,
                  nullptr, 0);
      }
      // The view: the budget and what other jobs occupy of it now, or the class's own share where
      // the policy gives one. Conservative for a production job under tgs, which could displace
      // opportunistic memory; the interposer also caps it by the driver's own answer.
      bytes total = budget_;
      bytes others = bytes{all_resident} - resident(h);
      if (const std::optional<bytes>& view = j.cls == job_class::production ? d.production_view : d.opportunistic_view) {
        total = *view;
        others = bytes{};
      }
      s.view_total_bytes.store(total.count(), std::memory_order_relaxed);
      s.view_others_bytes.store(others.count(), std::memory_order_relaxed);
    }
  }

  Policy policy_;
  bytes budget_;
  residency_split split_;
  duration eviction_stall_;
  bytes limit_ = bytes::max();
  std::vector<job> jobs_;
};

}  // namespace tgs::cuda::node
