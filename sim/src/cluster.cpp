// SPDX-License-Identifier: Apache-2.0
// The cluster simulator's event engine, placement and per-GPU rate schedules.
#include "tgs/sim/cluster.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <charconv>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <array>
#include <bit>
#include <optional>
#include <stdexcept>

#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"

namespace tgs::sim {
namespace {

constexpr double infinite = std::numeric_limits<double>::infinity();

/// The instant `seconds` after `t`, rounded up to the nanosecond, or empty when it lies beyond
/// the simulator's horizon (policy time is int64 nanoseconds: about 292 years). Converting a
/// larger double would be undefined; an event that far away is simply not scheduled, and a job
/// whose completion never fits is reported when the run ends.
std::optional<instant> after(instant t, double seconds) noexcept {
  const double limit = to_seconds(never - t) - 1.0;
  if (!(seconds <= limit)) return std::nullopt;  // also refuses NaN
  return t + std::chrono::ceil<duration>(std::chrono::duration<double>(seconds));
}

/// Rates of a GPU's occupants from the start of their co-location: the policy's transient
/// (TGS: profiling with the opportunistic job held, then slow start) and its steady state.
struct phase {
  double until_s;  ///< seconds after the co-location started; `infinite` for the steady phase
  double production;
  double opportunistic;
};

struct pair_schedule {
  std::vector<phase> phases;
  bool refused = false;
};

/// Simulates each distinct co-location once with the real policy objects (run_pair) and keeps
/// its rates as three phases: before the opportunistic job first runs (TGS profiles), until it
/// reaches 90% of its steady rate (slow start), and the steady mean. A co-location's dynamics
/// depend only on the two models and the policy, since every pairing starts the controller
/// afresh, so a 100-day trace simulates each pair once instead of once per occurrence.
class schedule_cache {
 public:
  schedule_cache(const calibrated_model& model, const gpu_profile& gpu, std::string policy,
                 const cluster_options& options)
      : model_(model),
        gpu_(gpu),
        policy_(std::move(policy)),
        traits_(policy_traits(policy_)),
        options_(options) {}

  /// Whether some co-location computed so far was refused (its memory policy denied it).
  [[nodiscard]] bool any_refused() const noexcept { return any_refused_; }

  const pair_schedule& get(const model_profile* production, const model_profile* opportunistic) {
    // The catalog's models by position, so the hot path is an index instead of a tree walk; a
    // profile from elsewhere (a caller's own catalog) goes through the map.
    const auto& models = model_.data.models;
    auto slot = [&](const model_profile* m) -> std::optional<std::size_t> {
      if (m == nullptr) return models.size();
      if (models.empty() || m < models.data() || m >= models.data() + models.size()) return std::nullopt;
      return static_cast<std::size_t>(m - models.data());
    };
    const auto a = slot(production);
    const auto b = slot(opportunistic);
    if (a && b) {
      const std::size_t width = models.size() + 1;
      if (table_.empty()) table_.resize(width * width);
      auto& entry = table_[*a * width + *b];
      if (!entry) entry = &get_slow(production, opportunistic);
      return *entry;
    }
    return get_slow(production, opportunistic);
  }

 private:
  const pair_schedule& get_slow(const model_profile* production, const model_profile* opportunistic) {
    const auto key = std::make_pair(production, opportunistic);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      it = cache_.emplace(key, compute(production, opportunistic)).first;
      any_refused_ = any_refused_ || it->second.refused;
    }
    return it->second;
  }

  pair_schedule compute(const model_profile* p, const model_profile* o) const {
    constexpr double horizon = 900;  // s; TGS settles within ~60 s of a pairing
    pair_spec spec;
    spec.production = pair_job{p, epoch, {}, {}};
    spec.opportunistic = pair_job{o, epoch, {}, {}};
    spec.gpu = gpu_;
    spec.memory_budget = gpu_.memory;
    spec.interposed = traits_.enforced_by == enforcement::interposer;
    spec.run_for = from_seconds(horizon);
    spec.warmup = duration::zero();
    struct collect {
      std::vector<pair_segment>* out;
      void on_segment(const pair_segment& s) { out->push_back(s); }
    };
    std::vector<pair_segment> segments;
    any_rate_controller controller{*options_.rate_settings.find(policy_)};
    any_memory_policy memory{*options_.memory_settings.find(traits_.default_memory_policy)};
    const pair_outcome outcome =
        run_pair(spec, std::move(controller), std::move(memory), collect{&segments});
    pair_schedule s;
    s.refused = outcome.opportunistic_refused;
    auto mean = [&](double from, double to) {
      double tp = 0;
      double to_ = 0;
      double time = 0;
      for (const auto& seg : segments) {
        const double a = std::max(from, to_seconds(seg.start - epoch));
        const double b = std::min(to, to_seconds(seg.end - epoch));
        if (b <= a) continue;
        tp += seg.rates.production * (b - a);
        to_ += seg.rates.opportunistic * (b - a);
        time += b - a;
      }
      return time > 0 ? std::pair{tp / time, to_ / time} : std::pair{0.0, 0.0};
    };
    const auto steady = mean(horizon / 2, horizon);
    double hold_end = 0;
    double ramp_end = 0;
    if (o != nullptr && steady.second > 0) {
      hold_end = horizon;
      for (const auto& seg : segments) {
        if (seg.rates.opportunistic > 0) {
          hold_end = to_seconds(seg.start - epoch);
          break;
        }
      }
      ramp_end = hold_end;
      for (const auto& seg : segments) {
        const double start = to_seconds(seg.start - epoch);
        if (start >= hold_end && seg.rates.opportunistic >= 0.9 * steady.second) {
          ramp_end = start;
          break;
        }
      }
    }
    if (hold_end > 0) {
      const auto m = mean(0, hold_end);
      s.phases.push_back({hold_end, m.first, m.second});
    }
    if (ramp_end > hold_end) {
      const auto m = mean(hold_end, ramp_end);
      s.phases.push_back({ramp_end, m.first, m.second});
    }
    s.phases.push_back({infinite, steady.first, steady.second});
    return s;
  }

  const calibrated_model& model_;
  const gpu_profile& gpu_;
  std::string policy_;
  rate_policy_traits traits_;
  const cluster_options& options_;
  std::map<std::pair<const model_profile*, const model_profile*>, pair_schedule> cache_;
  std::vector<const pair_schedule*> table_;  // (production, opportunistic) by catalog position
  bool any_refused_ = false;
};

/// The engine's pending events, one slot per job (its completion) and per GPU (its next rate
/// phase): a binary min-heap ordered by (time, sequence number) whose entries are updated in place
/// when a rate or a schedule changes, so the heap never holds a stale event and stays as small as
/// the jobs running (arrivals come from the sorted job list, not the heap).
class event_heap {
 public:
  explicit event_heap(std::size_t slots) : position_(slots, absent) {}

  [[nodiscard]] bool empty() const noexcept { return heap_.empty(); }
  [[nodiscard]] instant top_time() const noexcept { return heap_.front().at; }
  [[nodiscard]] std::uint64_t top_seq() const noexcept { return heap_.front().seq; }
  [[nodiscard]] std::uint32_t top_slot() const noexcept { return heap_.front().slot; }

  /// Schedules `slot` at `at` (replacing its pending event, if any), ordered after every event
  /// already scheduled for the same instant.
  void schedule(std::uint32_t slot, instant at, std::uint64_t seq) {
    std::size_t i = position_[slot];
    if (i == absent) {
      i = heap_.size();
      heap_.push_back({at, seq, slot});
      position_[slot] = i;
    } else {
      heap_[i].at = at;
      heap_[i].seq = seq;
    }
    if (!up(i)) down(i);
  }

  /// Drops the pending event of `slot`, if any.
  void cancel(std::uint32_t slot) {
    const std::size_t i = position_[slot];
    if (i == absent) return;
    position_[slot] = absent;
    const std::size_t last = heap_.size() - 1;
    if (i != last) {
      heap_[i] = heap_[last];
      position_[heap_[i].slot] = i;
      heap_.pop_back();
      if (!up(i)) down(i);
    } else {
      heap_.pop_back();
    }
  }

  void pop() { cancel(heap_.front().slot); }

 private:
  static constexpr std::size_t absent = std::numeric_limits<std::size_t>::max();
  struct entry {
    instant at;
    std::uint64_t seq;
    std::uint32_t slot;
  };
  static bool before(const entry& a, const entry& b) noexcept {
    return a.at != b.at ? a.at < b.at : a.seq < b.seq;
  }
  void place(std::size_t i, const entry& e) {
    heap_[i] = e;
    position_[e.slot] = i;
  }
  bool up(std::size_t i) {
    const entry e = heap_[i];
    const std::size_t from = i;
    while (i > 0) {
      const std::size_t parent = (i - 1) / 2;
      if (!before(e, heap_[parent])) break;
      place(i, heap_[parent]);
      i = parent;
    }
    place(i, e);
    return i != from;
  }
  void down(std::size_t i) {
    const entry e = heap_[i];
    const std::size_t n = heap_.size();
    while (true) {
      std::size_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && before(heap_[child + 1], heap_[child])) ++child;
      if (!before(heap_[child], e)) break;
      place(i, heap_[child]);
      i = child;
    }
    place(i, e);
  }

  std::vector<entry> heap_;
  std::vector<std::size_t> position_;
};

/// The cluster as a graph: one vertex per server and per GPU, an edge from each server to its
/// GPUs. Placement walks a server's adjacent GPUs; a richer topology (NVLink islands, racks)
/// adds vertices and edges without changing the walk.
using topology = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

class engine {
 public:
  engine(const calibrated_model& model, const cluster_spec& cluster,
         const std::vector<cluster_job>& jobs, const std::string& policy,
         const cluster_options& options)
      : jobs_(jobs),
        options_(options),
        exclusive_(!policy_traits(policy).co_locates),
        cache_(model, *model.data.find_gpu(cluster.gpu), policy, options),
        graph_(static_cast<std::size_t>(cluster.nodes + cluster.gpus())),
        events_(jobs.size() + static_cast<std::size_t>(cluster.gpus())) {
    gpus_.resize(static_cast<std::size_t>(cluster.gpus()));
    nodes_.resize(static_cast<std::size_t>(cluster.nodes));
    for (int n = 0; n < cluster.nodes; ++n) {
      for (int k = 0; k < cluster.gpus_per_node; ++k) {
        const int g = n * cluster.gpus_per_node + k;
        boost::add_edge(static_cast<std::size_t>(n), static_cast<std::size_t>(cluster.nodes + g),
                        graph_);
        gpus_[static_cast<std::size_t>(g)].node = n;
      }
      nodes_[static_cast<std::size_t>(n)] = {cluster.gpus_per_node, cluster.gpus_per_node};
    }
    for (auto& buckets : by_free_) {
      buckets.resize(static_cast<std::size_t>(cluster.gpus_per_node) + 1);
      for (auto& b : buckets) b.resize(cluster.nodes);
      for (int n = 0; n < cluster.nodes; ++n) buckets[static_cast<std::size_t>(cluster.gpus_per_node)].insert(n);
    }
    free_production_ = free_opportunistic_ = cluster.gpus();
    node_count_ = cluster.nodes;
    state_.resize(jobs.size());
    result_.policy = policy;
    result_.jobs.resize(jobs.size());
  }

  cluster_result run() {
    // Arrivals in submission order (stable: equal times keep the list's order), merged with the
    // heap; an arrival goes before a heap event of the same instant, as it was scheduled first.
    std::vector<std::uint32_t> arrivals(jobs_.size());
    for (std::size_t i = 0; i < jobs_.size(); ++i) arrivals[i] = static_cast<std::uint32_t>(i);
    std::stable_sort(arrivals.begin(), arrivals.end(), [&](std::uint32_t a, std::uint32_t b) {
      return jobs_[a].submit < jobs_[b].submit;
    });
    seq_ = jobs_.size();
    std::size_t next_arrival = 0;
    std::size_t reported = 0;
    while (next_arrival < arrivals.size() || !events_.empty()) {
      const bool arrival =
          next_arrival < arrivals.size() &&
          (events_.empty() || jobs_[arrivals[next_arrival]].submit <= events_.top_time());
      const instant at = arrival ? jobs_[arrivals[next_arrival]].submit : events_.top_time();
      if (options_.check_invariants && at < now_) {
        throw std::logic_error("cluster engine: time went back");
      }
      advance_to(at);
      ++result_.events;
      if (arrival) {
        const std::uint32_t j = arrivals[next_arrival++];
        (jobs_[j].cls == job_class::production ? production_queue_ : opportunistic_queue_)
            .push_back({j, jobs_[j].gpus});
        ++queue_version_[jobs_[j].cls == job_class::production ? 0 : 1];
        schedule();
      } else {
        const std::uint32_t slot = events_.top_slot();
        events_.pop();
        if (slot < jobs_.size()) {
          finish(slot);
          schedule();
        } else {
          next_phase(static_cast<std::uint32_t>(slot - jobs_.size()));
        }
      }
      if (options_.check_invariants) check();
      if (options_.progress && !jobs_.empty()) {
        const std::size_t percent = finished_ * 100 / jobs_.size();
        if (percent > reported) {
          reported = percent;
          options_.progress(static_cast<double>(finished_) / static_cast<double>(jobs_.size()));
        }
      }
    }
    if (finished_ != jobs_.size()) {
      for (std::size_t j = 0; j < jobs_.size(); ++j) {
        if (state_[j].finished) continue;
        throw input_error(fmt::format(
            "job {} would not finish within the simulator's horizon (about 292 years of "
            "simulated time) at the rate it gets under {}; shorten the job",
            static_cast<std::uint32_t>(jobs_[j].id), result_.policy));
      }
    }
    flush_utilization();
    return std::move(result_);
  }

 private:
  /// A queued job with the GPUs it needs beside it, so a scan of the queue stays in the queue.
  struct queued {
    std::uint32_t job;
    std::uint32_t gpus;
  };
  struct gpu_state {
    int node = 0;
    int production = -1;
    int opportunistic = -1;
    const pair_schedule* schedule = nullptr;
    instant paired_at = epoch;
    std::size_t phase = 0;
    double busy = 0;  // Σ busy fraction × actual rate of its occupants
    bool allocated = false;
  };
  struct node_state {
    int free_production;     // GPUs a production job may take
    int free_opportunistic;  // GPUs an opportunistic job may take
  };
  struct job_state {
    double done = 0;  // standalone seconds of work completed
    double rate = 0;  // current relative rate
    instant last = epoch;
    bool running = false;
    bool started = false;
    bool finished = false;
    std::vector<int> gpus;
  };

  [[nodiscard]] std::uint32_t phase_slot(int g) const noexcept {
    return static_cast<std::uint32_t>(jobs_.size() + static_cast<std::size_t>(g));
  }

  // --- utilisation: integrate allocated and busy GPU shares into buckets -------------------
  void advance_to(instant t) {
    accumulate(t);
    now_ = t;
  }
  void accumulate(instant t) {
    const double bucket = to_seconds(options_.utilization_bucket);
    double from = to_seconds(now_ - epoch);
    const double to = to_seconds(t - epoch);
    const double gpus = static_cast<double>(gpus_.size());
    while (from < to) {
      const auto index = static_cast<std::size_t>(from / bucket);
      const double end = std::min(to, static_cast<double>(index + 1) * bucket);
      if (result_.utilization.size() <= index) {
        const std::size_t old = result_.utilization.size();
        result_.utilization.resize(index + 1);
        for (std::size_t i = old; i <= index; ++i) {
          result_.utilization[i].start_s = static_cast<double>(i) * bucket;
        }
      }
      result_.utilization[index].allocated += allocated_ / gpus * (end - from) / bucket;
      result_.utilization[index].busy += busy_ / gpus * (end - from) / bucket;
      from = end;
    }
  }
  void flush_utilization() {
    // The last bucket is partial: scale it to the time it covers.
    if (result_.utilization.empty()) return;
    const double bucket = to_seconds(options_.utilization_bucket);
    auto& last = result_.utilization.back();
    const double covered = to_seconds(now_ - epoch) - last.start_s;
    if (covered > 0 && covered < bucket) {
      last.allocated *= bucket / covered;
      last.busy *= bucket / covered;
    }
  }

  // --- eligibility ----------------------------------------------------------------------------
  /// Whether a job of class `c` may take GPU `g`. A production job may take any GPU without a
  /// production job: under exclusive it preempts an opportunistic job there (opportunistic jobs
  /// are best-effort), under the sharing policies it runs beside it.
  [[nodiscard]] bool eligible(const gpu_state& g, job_class c) const noexcept {
    if (c == job_class::production) return g.production < 0;
    return g.opportunistic < 0 && (!exclusive_ || g.production < 0);
  }
  /// Nodes by how many GPUs each class may take there, in node order: best fit and the
  /// most-room-first order read them instead of scanning every node.
  void move_bucket(std::size_t c, int node, int from, int to) {
    if (from == to) return;
    by_free_[c][static_cast<std::size_t>(from)].erase(node);
    by_free_[c][static_cast<std::size_t>(to)].insert(node);
  }

  /// A set of node numbers as a bitset: insert, erase and an ordered walk, without allocating.
  class node_set {
   public:
    void resize(int nodes) { words_.assign((static_cast<std::size_t>(nodes) + 63) / 64, 0); }
    void insert(int n) {
      std::uint64_t& w = words_[static_cast<std::size_t>(n) / 64];
      const std::uint64_t bit = std::uint64_t{1} << (static_cast<unsigned>(n) % 64);
      count_ += (w & bit) == 0 ? 1 : 0;
      w |= bit;
    }
    void erase(int n) {
      std::uint64_t& w = words_[static_cast<std::size_t>(n) / 64];
      const std::uint64_t bit = std::uint64_t{1} << (static_cast<unsigned>(n) % 64);
      count_ -= (w & bit) != 0 ? 1 : 0;
      w &= ~bit;
    }
    [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
    /// Calls `f(node)` in increasing order until it returns true.
    template <typename F>
    bool any_of(F&& f) const {
      if (count_ == 0) return false;
      for (std::size_t i = 0; i < words_.size(); ++i) {
        for (std::uint64_t w = words_[i]; w != 0; w &= w - 1) {
          if (f(static_cast<int>(i * 64 + static_cast<std::size_t>(std::countr_zero(w))))) return true;
        }
      }
      return false;
    }

   private:
    std::vector<std::uint64_t> words_;
    std::size_t count_ = 0;
  };

  /// GPUs for `job` into `out`, or empty when they are not free now. One server when one fits
  /// (best fit: the fullest server that fits, the first in node order among equals), else the
  /// servers with most free GPUs first (node order among equals). Opportunistic jobs take GPUs
  /// beside a production job first when told to, keeping free GPUs for production jobs.
  void choose(const cluster_job& job, std::vector<int>& out) {
    out.clear();
    const job_class c = job.cls;
    const int need = static_cast<int>(job.gpus);
    if ((c == job_class::production ? free_production_ : free_opportunistic_) < need) return;
    const auto& buckets = by_free_[c == job_class::production ? 0 : 1];
    auto usable = [&](int g) {
      const gpu_state& s = gpus_[static_cast<std::size_t>(g)];
      if (!eligible(s, c)) return false;
      // A memory policy may refuse a co-location (no oversubscription, hard limits).
      const int other = c == job_class::production ? s.opportunistic : s.production;
      if (other < 0) return true;
      const model_profile* p = c == job_class::production ? job.model : jobs_[static_cast<std::size_t>(other)].model;
      const model_profile* o = c == job_class::production ? jobs_[static_cast<std::size_t>(other)].model : job.model;
      return !cache_.get(p, o).refused;
    };
    auto take_from = [&](int n, int limit) {
      beside_.clear();
      empty_.clear();
      for (const auto v : boost::make_iterator_range(
               boost::adjacent_vertices(static_cast<std::size_t>(n), graph_))) {
        const int g = static_cast<int>(v) - node_count_;
        if (!usable(g)) continue;
        const gpu_state& s = gpus_[static_cast<std::size_t>(g)];
        const bool occupied = s.production >= 0 || s.opportunistic >= 0;
        (occupied ? beside_ : empty_).push_back(g);
      }
      const auto& first = prefer_beside(c) ? beside_ : empty_;
      const auto& second = prefer_beside(c) ? empty_ : beside_;
      for (const auto* list : {&first, &second}) {
        for (int g : *list) {
          if (static_cast<int>(out.size()) >= limit) return;
          out.push_back(g);
        }
      }
    };
    for (std::size_t f = static_cast<std::size_t>(need); f < buckets.size(); ++f) {
      if (buckets[f].empty()) continue;
      buckets[f].any_of([&](int n) {
        take_from(n, need);
        return true;
      });
      if (static_cast<int>(out.size()) == need) return;
      out.clear();
      break;
    }
    for (std::size_t f = buckets.size(); f-- > 1;) {
      const bool done = buckets[f].any_of([&](int n) {
        take_from(n, need);
        return static_cast<int>(out.size()) == need;
      });
      if (done) return;
    }
    out.clear();
  }

  [[nodiscard]] bool prefer_beside(job_class c) const noexcept {
    return c == job_class::opportunistic && options_.opportunistic_beside_production;
  }

  // --- scheduling -------------------------------------------------------------------------------
  void schedule() {
    drain(production_queue_, job_class::production);
    drain(opportunistic_queue_, job_class::opportunistic);
  }
  void drain(std::deque<queued>& queue, job_class c) {
    const std::size_t k = c == job_class::production ? 0 : 1;
    auto free_now = [&] { return c == job_class::production ? free_production_ : free_opportunistic_; };
    // Without refused co-locations a job fits exactly when it needs no more GPUs than are free, so
    // a scan is not repeated while neither its queue nor the free GPUs changed since the last one.
    const bool exact = !cache_.any_refused();
    if (exact && scanned_[k] == std::pair{queue_version_[k], free_now()}) return;
    std::size_t examined = 0;
    for (auto it = queue.begin(); it != queue.end() && examined <= options_.lookahead;) {
      const int free = free_now();
      if (free == 0) break;
      const std::uint32_t j = it->job;
      // More GPUs than are free: no placement can fit it (read from the queue, not the job list).
      if (it->gpus > static_cast<std::uint32_t>(free)) {
        ++it;
        ++examined;
        continue;
      }
      choose(jobs_[j], chosen_);
      if (chosen_.empty()) {
        ++it;
        ++examined;
        continue;
      }
      it = queue.erase(it);
      ++queue_version_[k];
      start(j, chosen_);
    }
    scanned_[k] = {queue_version_[k], free_now()};
  }

  void start(std::uint32_t j, const std::vector<int>& gpus) {
    job_state& s = state_[j];
    s.running = true;
    s.last = now_;
    s.gpus = gpus;
    if (!s.started) result_.jobs[j].start_s = to_seconds(now_ - epoch);
    s.started = true;
    if (exclusive_ && jobs_[j].cls == job_class::production) {
      for (int g : s.gpus) {
        const int victim = gpus_[static_cast<std::size_t>(g)].opportunistic;
        if (victim >= 0) preempt(static_cast<std::uint32_t>(victim));
      }
    }
    for (int g : s.gpus) {
      const gpu_state& gs = gpus_[static_cast<std::size_t>(g)];
      if ((jobs_[j].cls == job_class::production ? gs.production : gs.opportunistic) >= 0) {
        throw std::logic_error("cluster engine: GPU slot already taken");
      }
      occupy(g, jobs_[j].cls, static_cast<int>(j));
    }
    for (int g : s.gpus) repair(g);
  }

  /// Puts `job` (or nobody: -1) in GPU `g`'s slot of class `c`, keeping the free-GPU counts of
  /// its node, the cluster and the node buckets in step.
  void occupy(int g, job_class c, int job) {
    gpu_state& gs = gpus_[static_cast<std::size_t>(g)];
    const bool production_before = eligible(gs, job_class::production);
    const bool opportunistic_before = eligible(gs, job_class::opportunistic);
    (c == job_class::production ? gs.production : gs.opportunistic) = job;
    node_state& n = nodes_[static_cast<std::size_t>(gs.node)];
    auto update = [&](std::size_t k, bool before, bool after, int& node_free, int& total) {
      if (before == after) return;
      const int d = after ? 1 : -1;
      move_bucket(k, gs.node, node_free, node_free + d);
      node_free += d;
      total += d;
    };
    update(0, production_before, eligible(gs, job_class::production), n.free_production, free_production_);
    update(1, opportunistic_before, eligible(gs, job_class::opportunistic), n.free_opportunistic,
           free_opportunistic_);
  }

  /// Suspends an opportunistic job (exclusive mode): it keeps its progress, as a checkpointed
  /// best-effort job does, and waits at the head of its queue.
  void preempt(std::uint32_t j) {
    job_state& s = state_[j];
    set_rate(j, 0);
    if (!options_.preempted_keep_progress) s.done = 0;
    s.running = false;
    events_.cancel(j);
    for (int g : s.gpus) occupy(g, job_class::opportunistic, -1);
    const std::vector<int> freed = std::move(s.gpus);
    s.gpus.clear();
    for (int g : freed) repair(g);
    opportunistic_queue_.push_front({j, jobs_[j].gpus});
    ++queue_version_[1];
    ++result_.preemptions;
  }

  void finish(std::uint32_t j) {
    job_state& s = state_[j];
    s.running = false;
    s.finished = true;
    ++finished_;
    result_.jobs[j].end_s = to_seconds(now_ - epoch);
    for (int g : s.gpus) occupy(g, jobs_[j].cls, -1);
    set_rate(j, 0);
    for (int g : s.gpus) repair(g);
  }

  /// The GPU's occupants changed: start their co-location's schedule afresh.
  void repair(int g) {
    gpu_state& gs = gpus_[static_cast<std::size_t>(g)];
    const bool allocated = gs.production >= 0 || gs.opportunistic >= 0;
    if (allocated != gs.allocated) allocated_ += allocated ? 1.0 : -1.0;
    gs.allocated = allocated;
    events_.cancel(phase_slot(g));
    gs.phase = 0;
    gs.paired_at = now_;
    if (gs.production < 0 && gs.opportunistic < 0) {
      gs.schedule = nullptr;
    } else {
      const model_profile* p =
          gs.production >= 0 ? jobs_[static_cast<std::size_t>(gs.production)].model : nullptr;
      const model_profile* o = gs.opportunistic >= 0
                                   ? jobs_[static_cast<std::size_t>(gs.opportunistic)].model
                                   : nullptr;
      gs.schedule = &cache_.get(p, o);
      if (p != nullptr && o != nullptr) ++result_.pairings;
      arm_phase(g);
    }
    refresh_occupants(g);
  }

  void arm_phase(int g) {
    gpu_state& gs = gpus_[static_cast<std::size_t>(g)];
    const double until = gs.schedule->phases[gs.phase].until_s;
    if (std::isfinite(until)) {
      if (const auto at = after(gs.paired_at, until)) events_.schedule(phase_slot(g), *at, seq_++);
    }
  }

  void next_phase(std::uint32_t g) {
    gpu_state& gs = gpus_[g];
    if (gs.schedule == nullptr || gs.phase + 1 >= gs.schedule->phases.size()) return;
    ++gs.phase;
    arm_phase(static_cast<int>(g));
    refresh_occupants(static_cast<int>(g));
  }

  [[nodiscard]] double gpu_rate(int g, job_class c) const noexcept {
    const gpu_state& gs = gpus_[static_cast<std::size_t>(g)];
    if (gs.schedule == nullptr) return 0;
    const phase& p = gs.schedule->phases[gs.phase];
    return c == job_class::production ? p.production : p.opportunistic;
  }

  void refresh_occupants(int g) {
    const gpu_state& gs = gpus_[static_cast<std::size_t>(g)];
    for (int j : {gs.production, gs.opportunistic}) {
      if (j < 0) continue;
      // Synchronous data-parallel training moves at the pace of its slowest GPU.
      double rate = infinite;
      for (int other : state_[static_cast<std::size_t>(j)].gpus) {
        rate = std::min(rate, gpu_rate(other, jobs_[static_cast<std::size_t>(j)].cls));
      }
      set_rate(static_cast<std::uint32_t>(j), rate);
    }
  }

  void set_rate(std::uint32_t j, double rate) {
    job_state& s = state_[j];
    const cluster_job& job = jobs_[j];
    s.done += s.rate * to_seconds(now_ - s.last);
    s.last = now_;
    if (rate == s.rate && s.running) return;
    const double busy_delta = job.model->busy_fraction * (rate - s.rate);
    for (int g : s.gpus) {
      gpus_[static_cast<std::size_t>(g)].busy += busy_delta;
      busy_ += busy_delta;
    }
    s.rate = rate;
    const double left = std::max(0.0, job.work_seconds - s.done);
    // A job held to a sliver of its speed (a starved opportunistic job) may finish past the end
    // of policy time: it waits for its GPU's occupants to change instead.
    const std::optional<instant> at = s.running && rate > 0 ? after(now_, left / rate) : std::nullopt;
    if (at) {
      events_.schedule(j, std::max(*at, now_ + duration{1}), seq_++);
    } else {
      events_.cancel(j);
    }
  }

  void check() const {
    int production_free = 0;
    int opportunistic_free = 0;
    for (const auto& g : gpus_) {
      if (exclusive_ && g.production >= 0 && g.opportunistic >= 0) {
        throw std::logic_error("cluster engine: exclusive GPU shared");
      }
      if (g.production >= 0 && jobs_[static_cast<std::size_t>(g.production)].cls != job_class::production) {
        throw std::logic_error("cluster engine: non-production job in the production slot");
      }
      production_free += eligible(g, job_class::production) ? 1 : 0;
      opportunistic_free += eligible(g, job_class::opportunistic) ? 1 : 0;
    }
    if (production_free != free_production_ || opportunistic_free != free_opportunistic_) {
      throw std::logic_error("cluster engine: free-GPU counts out of step");
    }
  }

  const std::vector<cluster_job>& jobs_;
  const cluster_options& options_;
  bool exclusive_;
  schedule_cache cache_;
  topology graph_;
  int node_count_ = 0;
  std::vector<gpu_state> gpus_;
  std::vector<node_state> nodes_;
  std::vector<job_state> state_;
  std::deque<queued> production_queue_;
  std::deque<queued> opportunistic_queue_;
  std::array<std::uint64_t, 2> queue_version_{};  // per class: bumped on every change of its queue
  std::array<std::pair<std::uint64_t, int>, 2> scanned_{{{~std::uint64_t{0}, -1}, {~std::uint64_t{0}, -1}}};
  event_heap events_;
  std::array<std::vector<node_set>, 2> by_free_;  // per class (production, opportunistic)
  std::vector<int> chosen_;
  std::vector<int> beside_;
  std::vector<int> empty_;
  std::uint64_t seq_ = 0;
  instant now_ = epoch;
  int free_production_ = 0;
  int free_opportunistic_ = 0;
  double busy_ = 0;
  double allocated_ = 0;
  std::size_t finished_ = 0;
  cluster_result result_;
};

}  // namespace

cluster_spec parse_cluster_spec(std::string_view text) {
  const auto fail = [&] {
    return input_error(fmt::format(
        "--cluster: expected NODESxGPUS[:TYPE] with 1-100000 nodes of 1-64 GPUs (e.g. "
        "\"64x8:a100-40gb\"), got \"{}\"",
        text));
  };
  cluster_spec spec;
  std::string_view shape = text;
  if (const auto colon = text.find(':'); colon != std::string_view::npos) {
    spec.gpu = std::string(text.substr(colon + 1));
    shape = text.substr(0, colon);
    if (spec.gpu.empty()) throw fail();
  }
  const auto x = shape.find('x');
  if (x == std::string_view::npos) throw fail();
  auto parse = [&](std::string_view s, int lo, int hi) {
    int v = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || ptr != s.data() + s.size() || v < lo || v > hi) throw fail();
    return v;
  };
  spec.nodes = parse(shape.substr(0, x), 1, 100000);
  spec.gpus_per_node = parse(shape.substr(x + 1), 1, 64);
  return spec;
}

cluster_result run_cluster(const calibrated_model& model, const cluster_spec& cluster,
                           const std::vector<cluster_job>& jobs, const std::string& policy,
                           const cluster_options& options) {
  if (model.data.find_gpu(cluster.gpu) == nullptr) {
    throw input_error(fmt::format("--cluster: unknown gpu type \"{}\"", cluster.gpu));
  }
  policy_traits(policy);  // an unknown name is bad input, before any work
  std::string extrapolated;
  try {
    const any_rate_controller check{*options.rate_settings.find(policy)};
    extrapolated = extrapolation_of(model.data, cluster.gpu, check);
  } catch (const config_error& e) {
    throw input_error(e.what());
  }
  for (const auto& j : jobs) {
    if (static_cast<int>(j.gpus) > cluster.gpus()) {
      throw input_error(fmt::format("job {} needs {} GPUs but the cluster has {}",
                                    static_cast<std::uint32_t>(j.id), j.gpus, cluster.gpus()));
    }
  }
  engine e(model, cluster, jobs, policy, options);
  cluster_result r = e.run();
  r.extrapolated = std::move(extrapolated);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    auto& out = r.jobs[i];
    out.id = jobs[i].id;
    out.cls = jobs[i].cls;
    out.model = jobs[i].model->model;
    out.gpus = jobs[i].gpus;
    out.submit_s = to_seconds(jobs[i].submit - epoch);
    out.work_seconds = jobs[i].work_seconds;
  }
  return r;
}

namespace {
double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const auto k = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) ;
  const std::size_t index = std::min(v.size() - 1, k == 0 ? 0 : k - 1);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(index), v.end());
  return v[index];
}
}  // namespace

class_summary summarize(const cluster_result& r, job_class cls) {
  class_summary s;
  std::vector<double> jct;
  std::vector<double> queueing;
  for (const auto& j : r.jobs) {
    if (j.cls != cls) continue;
    jct.push_back(j.jct());
    queueing.push_back(j.queueing());
  }
  s.jobs = jct.size();
  if (jct.empty()) return s;
  double sum_jct = 0;
  double sum_q = 0;
  for (std::size_t i = 0; i < jct.size(); ++i) {
    sum_jct += jct[i];
    sum_q += queueing[i];
  }
  s.mean_jct_s = sum_jct / static_cast<double>(jct.size());
  s.mean_queueing_s = sum_q / static_cast<double>(jct.size());
  s.p50_jct_s = quantile(jct, 0.5);
  s.p90_jct_s = quantile(jct, 0.9);
  s.p99_jct_s = quantile(jct, 0.99);
  s.p50_queueing_s = quantile(queueing, 0.5);
  s.p90_queueing_s = quantile(queueing, 0.9);
  return s;
}

std::vector<double> jct_cdf(const cluster_result& r, job_class cls, std::size_t points) {
  std::vector<double> jct;
  for (const auto& j : r.jobs) {
    if (j.cls == cls) jct.push_back(j.jct());
  }
  std::sort(jct.begin(), jct.end());
  std::vector<double> out;
  if (jct.empty()) return out;
  for (std::size_t i = 1; i <= points; ++i) {
    const double q = static_cast<double>(i) / static_cast<double>(points);
    const auto k = static_cast<std::size_t>(std::ceil(q * static_cast<double>(jct.size())));
    out.push_back(jct[std::min(jct.size() - 1, k == 0 ? 0 : k - 1)]);
  }
  return out;
}

std::vector<cluster_job> to_cluster_jobs(const traces::trace& t, const catalog& c,
                                         const std::string& gpu) {
  std::vector<cluster_job> out;
  out.reserve(t.jobs.size());
  for (const auto& r : t.jobs) {
    const auto where = [&] {
      return r.source_line > 0 ? fmt::format("{}:{}", t.source, r.source_line)
                               : fmt::format("{} job {}", t.source, static_cast<std::uint32_t>(r.id));
    };
    if (!r.priority) throw input_error(fmt::format("{}: the job has no class (production or opportunistic)", where()));
    if (!r.model) throw input_error(fmt::format("{}: the job has no model", where()));
    const model_profile* m = c.find_model(*r.model, gpu);
    if (m == nullptr) {
      throw input_error(fmt::format("{}: no profile for model \"{}\" on gpu \"{}\"", where(),
                                    *r.model, gpu));
    }
    cluster_job j;
    j.id = r.id;
    j.submit = r.submit;
    j.cls = *r.priority;
    j.model = m;
    j.gpus = r.gpus;
    if (r.iterations) {
      j.work_seconds = static_cast<double>(*r.iterations) * to_seconds(m->iteration_time);
    } else if (r.run_time) {
      j.work_seconds = to_seconds(*r.run_time);
    }
    // A zero-length job still passes through the queue and a GPU; give it one nanosecond.
    j.work_seconds = std::max(j.work_seconds, 1e-9);
    out.push_back(j);
  }
  return out;
}

}  // namespace tgs::sim
