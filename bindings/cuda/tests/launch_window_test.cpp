// SPDX-License-Identifier: Apache-2.0
// Tests of the launch window (intercept/launch_window.hpp) against scripted events: a device that
// finishes launches in order, a driver that fails, and a launch that never finishes.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "launch_window.hpp"

namespace {

using tgs::cuda::intercept::launch_window;
using tgs::cuda::intercept::LaunchEvents;
using tgs::cuda::intercept::window_wait;

/// A device that runs one stream's launches in order: `launched` counts launches, `finished` how
/// many of them are done. An event records the launch count at its record; waiting for it
/// finishes launches up to there, unless `stuck_at` says that launch never finishes.
struct scripted_events {
  using event = int;  // an index into `marks`, plus one (0: never created)
  using stream = int;

  std::vector<std::uint64_t> marks;  ///< per event: the launches before it at its record
  std::uint64_t launched = 0;
  std::uint64_t finished = 0;
  std::uint64_t stuck_at = UINT64_MAX;  ///< this launch (1-based) never finishes
  bool fail_create = false;
  bool fail_record = false;
  int created = 0;
  int destroyed = 0;
  std::vector<stream> recorded_on;

  bool create(event& e) {
    if (fail_create) return false;
    marks.push_back(0);
    e = static_cast<int>(marks.size());
    ++created;
    return true;
  }
  bool record(event& e, stream s) {
    if (fail_record) return false;
    marks[static_cast<std::size_t>(e - 1)] = launched;
    recorded_on.push_back(s);
    return true;
  }
  window_wait wait(event& e) {
    const std::uint64_t until = marks[static_cast<std::size_t>(e - 1)];
    if (until >= stuck_at) return window_wait::gave_up;
    finished = std::max(finished, until);
    return window_wait::finished;
  }
  void destroy(event&) { ++destroyed; }

  /// Unfinished launches right now.
  [[nodiscard]] std::uint64_t unfinished() const { return launched - finished; }
};
static_assert(LaunchEvents<scripted_events>);

/// One launch through the window, as the interposer makes it: room, launch, record.
template <std::size_t N>
void launch(launch_window<scripted_events, N>& w, scripted_events& ev, std::uint32_t limit, int stream = 7) {
  w.make_room(ev, limit);
  ++ev.launched;
  w.record(ev, stream);
}

/// Makes `launches` launches under `limit`; returns the most that were unfinished at once.
template <std::size_t N>
std::uint64_t most_unfinished(launch_window<scripted_events, N>& w, scripted_events& ev, std::uint32_t limit,
                              int launches) {
  std::uint64_t most = 0;
  for (int i = 0; i < launches; ++i) {
    launch(w, ev, limit);
    most = std::max(most, ev.unfinished());
  }
  return most;
}

}  // namespace

TEST(LaunchWindow, KeepsAtMostTheLimitUnfinished) {
  for (const std::uint32_t limit : {1u, 2u, 5u}) {
    scripted_events ev;
    launch_window<scripted_events, 8> w;
    EXPECT_EQ(most_unfinished(w, ev, limit, 40), limit) << "limit " << limit;
    EXPECT_EQ(w.outstanding(), limit);
    EXPECT_EQ(ev.created, static_cast<int>(limit)) << "events are reused, one per slot in use";
  }
}

TEST(LaunchWindow, WaitsForTheOldestLaunchFirst) {
  scripted_events ev;
  launch_window<scripted_events, 4> w;
  for (int i = 0; i < 3; ++i) launch(w, ev, 3);
  EXPECT_EQ(ev.finished, 0u);
  const auto room = w.make_room(ev, 3);
  EXPECT_EQ(room.waited, 1u);
  EXPECT_EQ(ev.finished, 1u) << "only the oldest launch had to finish";
}

TEST(LaunchWindow, ALowerLimitHoldsFromTheNextLaunchOn) {
  scripted_events ev;
  launch_window<scripted_events, 8> w;
  for (int i = 0; i < 6; ++i) launch(w, ev, 8);
  const auto room = w.make_room(ev, 2);
  EXPECT_EQ(room.waited, 6u);  // a new limit drains the window, then the ring is resized
  EXPECT_EQ(w.outstanding(), 0u);
  EXPECT_EQ(most_unfinished(w, ev, 2, 10), 2u);
}

TEST(LaunchWindow, ClampsTheLimitToItsCapacityAndToOne) {
  scripted_events ev;
  launch_window<scripted_events, 3> w;
  for (int i = 0; i < 10; ++i) launch(w, ev, 1000);
  EXPECT_EQ(ev.unfinished(), 3u);
  for (int i = 0; i < 10; ++i) launch(w, ev, 0);  // 0 is taken as 1 here: the caller skips the window for 0
  EXPECT_EQ(ev.unfinished(), 1u);
}

TEST(LaunchWindow, ALaunchThatNeverFinishesDoesNotBlockTheJob) {
  // A kernel that waits for a later kernel of the same job (a flag it sets) would deadlock a
  // window that cannot give up; this one counts the wait as given up and lets the launch go.
  scripted_events ev;
  ev.stuck_at = 2;
  launch_window<scripted_events, 4> w;
  launch(w, ev, 1);
  launch(w, ev, 1);
  const auto room = w.make_room(ev, 1);
  EXPECT_EQ(room.waited, 1u);
  EXPECT_EQ(room.gave_up, 1u);
  EXPECT_EQ(w.outstanding(), 0u);
}

TEST(LaunchWindow, ADriverThatCannotRecordLeavesLaunchesUntracked) {
  scripted_events ev;
  launch_window<scripted_events, 4> w;
  ev.fail_create = true;
  launch(w, ev, 1);
  EXPECT_EQ(w.outstanding(), 0u);
  ev.fail_create = false;
  ev.fail_record = true;
  launch(w, ev, 1);
  EXPECT_EQ(w.outstanding(), 0u);
  EXPECT_EQ(w.make_room(ev, 1).waited, 0u) << "nothing recorded, nothing to wait for";
}

TEST(LaunchWindow, RecordsOnTheLaunchStream) {
  scripted_events ev;
  launch_window<scripted_events, 4> w;
  launch(w, ev, 4, 3);
  launch(w, ev, 4, 9);
  EXPECT_EQ(ev.recorded_on, (std::vector<int>{3, 9}));
}

TEST(LaunchWindow, ANewLimitFirstWaitsForEveryOutstandingLaunch) {
  scripted_events ev;
  launch_window<scripted_events, 8> w;
  for (int i = 0; i < 4; ++i) launch(w, ev, 4);
  const auto room = w.make_room(ev, 6);
  EXPECT_EQ(room.waited, 4u);
  EXPECT_EQ(ev.unfinished(), 0u);
  EXPECT_EQ(most_unfinished(w, ev, 6, 20), 6u);
  EXPECT_EQ(ev.created, 6) << "the ring is as long as the limit in force";
}

TEST(LaunchWindow, ReleaseDestroysEveryEventAndAbandonDestroysNone) {
  scripted_events ev;
  launch_window<scripted_events, 4> w;
  for (int i = 0; i < 6; ++i) launch(w, ev, 3);
  w.release(ev);
  EXPECT_EQ(ev.destroyed, 3);
  EXPECT_EQ(w.outstanding(), 0u);
  for (int i = 0; i < 2; ++i) launch(w, ev, 3);
  EXPECT_EQ(ev.created, 5) << "released slots are created again";
  w.abandon();
  EXPECT_EQ(w.outstanding(), 0u);
  w.release(ev);
  EXPECT_EQ(ev.destroyed, 3) << "abandoned events belong to a context that is gone";
}

TEST(LaunchWindow, RecordWithoutRoomDoesNotOverwriteAnOutstandingLaunch) {
  scripted_events ev;
  launch_window<scripted_events, 2> w;
  ++ev.launched;
  EXPECT_FALSE(w.record(ev, 7)) << "no make_room yet";
  launch(w, ev, 2);
  launch(w, ev, 2);
  ++ev.launched;
  EXPECT_FALSE(w.record(ev, 7));
  EXPECT_EQ(w.outstanding(), 2u);
}
