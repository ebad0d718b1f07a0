// SPDX-License-Identifier: Apache-2.0
// tgs-node's choice of how each opportunistic job shares its GPU (`tgs::mechanism_choice`, made at
// registration from what the node measures and remembers), the profiles it remembers, and the
// correction: a job beside which the controller cannot keep the production job at its target is
// held, and its profile says so for its next start.
#include <algorithm>

#include "own_file.hpp"
#include "server_parts.hpp"

namespace tgs::cuda::node {

namespace {

/// Kernels a job must have timed before its longest one counts: a job that ended after a handful
/// has not shown its training loop.
constexpr std::uint64_t min_kernels_timed = 100;

/// Where a process runs, as one word for keys and tenants: its pod, else its container, else the
/// host (empty).
std::string place_of(const process_origin& o) { return !o.pod_uid.empty() ? o.pod_uid : o.container; }

}  // namespace

choice_facts node_server::facts_for(std::uint32_t gpu, uid_t uid, const process_origin& origin,
                                    const std::optional<job_profile>& profile) const {
  choice_facts f;
  f.preference = options_.opportunistic_mechanism;
  f.mps_available = mps_share_.has_value() && mps_ && mps_->available(gpu);
  // The GPU's production job: its tenant, its memory and how much its host waits for the GPU.
  for (const auto& [id, p] : jobs_) {
    if (p->gpu != gpu || p->cls != job_class::production) continue;
    // One tenant: one user, in one pod or container or both on the host. Containers of one user
    // in different pods may be different tenants (all run as root); their namespace is the
    // pod's environment's word, so it is not taken as the same tenant's.
    f.same_tenant = p->uid == uid && place_of(p->origin) == place_of(origin);
    f.production_bytes = bytes{p->segment->device_bytes.load(std::memory_order_relaxed) +
                               p->segment->managed_resident_bytes.load(std::memory_order_relaxed)};
    break;
  }
  if (const auto l = gpus_.find(gpu); l != gpus_.end()) f.production_gpu_wait = l->second->production_gpu_wait();
  if (options_.memory_policy) f.capacity = options_.memory_budget;
  if (profile) {
    f.longest_kernel = profile->longest_kernel;
    f.opportunistic_peak_bytes = profile->peak_bytes;
    f.hurt_as_mps_client = profile->hurt_as_mps_client;
    f.hurt_time_sliced = profile->hurt_time_sliced;
  }
  return f;
}

void node_server::choose_mechanism(job& j) {
  // Profiles are kept where the choice reads them: under auto (the other preferences decide on
  // the hard rules alone). Read before the check: a check passed says the reads were of the
  // registrant.
  if (options_.opportunistic_mechanism == mechanism_preference::automatic) {
    j.profile = profile_key_of(j.pid, j.uid, place_of(j.origin));
    if (j.process.exited()) j.profile.reset();
  }
  const std::optional<job_profile> profile = j.profile ? profiles_.find(*j.profile) : std::nullopt;
  const choice_facts facts = facts_for(j.gpu, j.uid, j.origin, profile);
  j.mechanism = chooser_.step(facts);
  const auto opt = [](const auto& v, auto show) { return v ? show(*v) : std::string("unmeasured"); };
  // The choice itself is on the registration's line (info); the facts behind it are here.
  log(log_level::debug,
      "job {} (pid {}) shares GPU {} as {} ({}): MPS {}, production {}, its host waiting {}, longest kernel {}, "
      "runs remembered {}",
      j.id, j.pid, j.gpu, to_string(j.mechanism->mechanism), to_string(j.mechanism->reason),
      facts.mps_available ? "available" : "not available",
      !facts.same_tenant ? std::string("absent") : *facts.same_tenant ? std::string("the same tenant's")
                                                                       : std::string("another tenant's"),
      opt(facts.production_gpu_wait, [](double w) { return fmt::format("{:.2f}", w); }),
      opt(facts.longest_kernel, [](duration d) { return fmt::format("{:.1f} ms", to_seconds(d) * 1e3); }),
      profile ? profile->runs : 0);
}

void node_server::note_profile(const job& j) {
  if (j.cls != job_class::opportunistic || !j.profile) return;
  job_profile& p = profiles_.at(*j.profile);
  const job_profile before = p;
  const abi::job_segment& seg = *j.segment;
  // Short kernels count once enough were timed; one long kernel counts at once (the safe side).
  const duration longest{static_cast<std::int64_t>(
      std::min<std::uint64_t>(seg.longest_kernel_ns.load(std::memory_order_relaxed), 3'600'000'000'000))};
  if (seg.kernels_timed.load(std::memory_order_relaxed) >= min_kernels_timed || longest >= options_.choice.long_kernel) {
    p.longest_kernel = std::max(p.longest_kernel.value_or(duration::zero()), longest);
  }
  const std::uint64_t held = seg.device_bytes.load(std::memory_order_relaxed) + seg.managed_bytes.load(std::memory_order_relaxed);
  if (held > 0) p.peak_bytes = std::max(p.peak_bytes.value_or(bytes{}), bytes{held});
  profiles_changed_ = profiles_changed_ || p.longest_kernel != before.longest_kernel || p.peak_bytes != before.peak_bytes;
}

void node_server::load_profiles() {
  if (options_.opportunistic_mechanism != mechanism_preference::automatic) return;
  const std::string path = profiles_path();
  std::string why;
  const std::optional<std::string> text = read_own_file(path, profiles_max_bytes, why);
  std::optional<job_profiles> read;
  if (text) read = parse_profiles(*text, why);
  if (read) {
    profiles_ = std::move(*read);
    log(log_level::info, "{} job profile(s) read from {}", profiles_.size(), path);
  } else if (!why.empty()) {
    // Started without them: each job's next start is chosen as a first one (the safe side).
    log(log_level::warn, "the job profiles {} are {}: ignored, and replaced at the next change", path, why);
  }
}

void node_server::sync_profiles(bool now) {
  if (options_.opportunistic_mechanism != mechanism_preference::automatic || !profiles_changed_) return;
  const clock::time_point t = clock::now();
  if (!now && t - profiles_written_ < std::chrono::seconds{1}) return;
  profiles_written_ = t;
  const std::string path = profiles_path();
  if (const std::string why = replace_own_file(path, format_profiles(profiles_)); !why.empty()) {
    if (why != profiles_trouble_) log(log_level::error, "cannot write the job profiles {}: {}", path, why);
    profiles_trouble_ = why;
    return;
  }
  profiles_trouble_.clear();
  profiles_changed_ = false;
}

void node_server::correct_mechanisms() {
  const clock::time_point t = clock::now();
  for (auto& [id, j] : jobs_) {
    // Settled either way: confirmed (held until production leaves) or released (not held again).
    // A late job is held for good (register_job): nothing to correct.
    if (j->cls != job_class::opportunistic || !j->in_control || j->confirmed || j->released || j->late) continue;
    const auto at = gpus_.find(j->gpu);
    if (at == gpus_.end()) continue;
    loop& l = *at->second;
    const bool unprotected = l.decision().production_unprotected;
    const opportunistic_mechanism was = j->mechanism ? j->mechanism->mechanism : opportunistic_mechanism::time_sliced;
    if (!j->corrected) {
      if (!unprotected) continue;
      j->corrected = true;
      j->corrected_at = t;
      l.hold(id, true);
      log(log_level::warn,
          "job {} (pid {}) held on GPU {}: its production co-runner stays below its target with the cap at its "
          "floor ({}); it runs again when the production job leaves",
          id, j->pid, j->gpu, to_string(was));
    } else if (!unprotected) {
      // Production recovered once the job stopped: the loss was the job's, and its next start
      // shares the other way (or waits).
      j->confirmed = true;
      if (j->profile) {
        job_profile& p = profiles_.at(*j->profile);
        (was == opportunistic_mechanism::mps_client ? p.hurt_as_mps_client : p.hurt_time_sliced) = true;
        profiles_changed_ = true;
      }
      log(log_level::info, "job {} (pid {}): production recovered while it was held; its next start is chosen "
          "knowing this", id, j->pid);
    } else if (t - j->corrected_at > correction_patience) {
      // Still below its target with the job launching nothing: the loss is not the job's (a
      // production job slowed by its own host, say). Let it run again, and not hold it again.
      j->corrected = false;
      j->released = true;
      l.hold(id, false);
      log(log_level::warn,
          "job {} (pid {}) released on GPU {}: production stayed below its target for {} s while it was held, so "
          "the loss is not its doing",
          id, j->pid, j->gpu, std::chrono::duration_cast<std::chrono::seconds>(correction_patience).count());
    }
  }
}

}  // namespace tgs::cuda::node
