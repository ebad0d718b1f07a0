// SPDX-License-Identifier: Apache-2.0
/// @file
/// The launch window: a bound on how many of a job's launches may be unfinished on the GPU at once.
///
/// Why: a rate budget says how many thread blocks an opportunistic job may launch per window, not
/// how far ahead of the GPU it may queue them. PyTorch queues hundreds of kernels ahead, so within
/// a window the job's whole budget can sit in the GPU's queue, and a production kernel that
/// arrives then waits behind it (time slicing hands the GPU to the other context for a whole
/// slice while it has work). On the H100 the production job's loss was a step: none up to about
/// 10 M opportunistic blocks/s, then 10-20% whatever the rate (`docs/results/sharing-targets.md`). A window of N launches keeps the opportunistic job's
/// backlog at N kernels, so the production job waits at most for those.
///
/// Mechanism only, and driver-agnostic: the interposer supplies the events (`LaunchEvents`), the
/// node sets N (`job_segment::max_inflight_launches`). The caller serialises calls (one mutex per
/// window), so the window itself holds no lock.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>

namespace tgs::cuda::intercept {

/// How a wait for an earlier launch ended.
enum class window_wait : std::uint8_t {
  finished,  ///< the launch finished (or the driver can no longer say: it is taken as finished)
  gave_up,   ///< it did not finish within the wait limit: the new launch goes ahead (fail open)
};

/// What a launch window needs from the driver: completion markers ("events") recorded on a stream
/// after a launch, and a bounded wait for one.
///
/// - `create(e)` makes a reusable marker; false if the driver cannot.
/// - `record(e, stream)` places it after the work queued on `stream` so far; false on failure.
/// - `wait(e)` blocks until the work before the marker has finished, or gives up after a limit.
/// - `destroy(e)` releases it.
///
/// Models: the interposer's `driver_events` (cuEventCreate / cuEventRecord / cuEventQuery, the
/// wait bounded by `abi::window_wait_limit_ns`), the tests' scripted events. A counter-example: a
/// `wait` that cannot give up, since a kernel that waits for a later kernel of the same job would
/// then deadlock it.
template <typename E>
concept LaunchEvents = requires(E& events, typename E::event& e, typename E::stream s) {
  { events.create(e) } -> std::same_as<bool>;
  { events.record(e, s) } -> std::same_as<bool>;
  { events.wait(e) } -> std::same_as<window_wait>;
  { events.destroy(e) } -> std::same_as<void>;
};

/// What one `make_room` did: how many earlier launches it waited for, and how many of those waits
/// gave up.
struct window_room {
  unsigned waited = 0;
  unsigned gave_up = 0;
};

/// At most `Capacity` outstanding launches of one context, oldest first, each marked by an event.
///
/// Use: `make_room(events, limit)` before a launch, `record(events, stream)` after it succeeded.
/// ```
/// window.make_room(events, 2);  // waits until at most 1 launch is unfinished
/// launch(stream);
/// window.record(events, stream);
/// ```
template <LaunchEvents Events, std::size_t Capacity>
class launch_window {
 public:
  using event = typename Events::event;
  using stream = typename Events::stream;
  static_assert(Capacity >= 1);

  /// Waits until fewer than `limit` launches are outstanding (`limit` clamped to [1, Capacity]),
  /// oldest first. A wait that gives up counts that launch as finished. The ring is as long as
  /// the limit, so a window of N holds N events; a new limit (rare: the operator's setting)
  /// first waits for every outstanding launch, then resizes it.
  window_room make_room(Events& events, std::uint32_t limit) noexcept {
    const std::size_t bound = limit < 1 ? 1 : (limit > Capacity ? Capacity : limit);
    window_room room;
    const std::size_t keep = bound == size_ ? bound - 1 : 0;
    while (count_ > keep) {
      ++room.waited;
      if (events.wait(slots_[head_]) == window_wait::gave_up) ++room.gave_up;
      head_ = (head_ + 1) % size_;
      --count_;
    }
    if (bound != size_) {
      size_ = bound;
      head_ = 0;
    }
    return room;
  }

  /// Marks the launch just made on `stream` as outstanding. False when the driver could not
  /// record it (the launch is then simply not tracked), or when `make_room` made no room first.
  bool record(Events& events, stream s) noexcept {
    if (count_ >= size_) return false;  // do not overwrite an outstanding launch
    const std::size_t slot = (head_ + count_) % size_;
    if (!created_[slot]) {
      if (!events.create(slots_[slot])) return false;
      created_[slot] = true;
    }
    if (!events.record(slots_[slot], s)) return false;
    ++count_;
    return true;
  }

  /// Releases every event and forgets the outstanding launches.
  void release(Events& events) noexcept {
    for (std::size_t i = 0; i < Capacity; ++i) {
      if (created_[i]) events.destroy(slots_[i]);
      created_[i] = false;
    }
    clear();
  }

  /// Forgets the events without releasing them: for when their context is gone, and releasing a
  /// stale handle is not safe.
  void abandon() noexcept {
    for (bool& c : created_) c = false;
    clear();
  }

  /// Launches recorded and not yet waited for (some may have finished already).
  [[nodiscard]] std::size_t outstanding() const noexcept { return count_; }

 private:
  /// Forgets every outstanding launch without waiting.
  void clear() noexcept {
    head_ = 0;
    count_ = 0;
  }

  event slots_[Capacity] = {};
  bool created_[Capacity] = {};
  std::size_t size_ = 0;   ///< the ring's length: the limit of the latest make_room (0: none yet)
  std::size_t head_ = 0;   ///< the oldest outstanding slot
  std::size_t count_ = 0;  ///< outstanding slots from head_ on
};

}  // namespace tgs::cuda::intercept
