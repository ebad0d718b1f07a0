// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `time_slice_lock`: quantum hand-over, early release of an idle holder, and
/// first-come first-served ownership.
#include <string>

#include <gtest/gtest.h>

#include "rate_test_support.hpp"
#include "tgs/rate/time_slice_lock.hpp"

namespace tgs::test {
namespace {

using lock_feed = feed<time_slice_lock>;

job_class holder_of(const rate_decision& d) { return std::get<exclusive_turn>(d.share).holder; }

TEST(TimeSliceLock, HandsOverAtTheEndOfTheQuantum) {
  lock_feed f{time_slice_lock{{}}};
  const rate_decision first = f.arrive();
  EXPECT_EQ(holder_of(first), job_class::production);
  EXPECT_EQ(first.opportunistic_budget, std::optional<std::uint64_t>{0});
  // The production job computes without pause: it keeps the lock for the whole 30 s quantum.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(holder_of(f.step(blocks(1'000), blocks(0))), job_class::production) << i;
  }
  const rate_decision handed = f.step(blocks(1'000), blocks(0));  // t = 30 s
  EXPECT_EQ(holder_of(handed), job_class::opportunistic);
  EXPECT_FALSE(handed.opportunistic_budget.has_value());
  EXPECT_EQ(f.controller.turn_start(), epoch + 30s);
}

TEST(TimeSliceLock, IdleHolderReleasesEarly) {
  lock_feed f{time_slice_lock{{}}};
  f.arrive();
  EXPECT_EQ(holder_of(f.step(blocks(1'000), blocks(0), 2s)), job_class::production);
  // No launches for 3 s: not yet idle long enough (5 s).
  EXPECT_EQ(holder_of(f.step(blocks(0), blocks(0), 3s)), job_class::production);
  // 5 s without launches: released to the waiting opportunistic job.
  EXPECT_EQ(holder_of(f.step(blocks(0), blocks(0), 2s)), job_class::opportunistic);
}

TEST(TimeSliceLock, RevisitsAtTheEarlierOfQuantumEndAndIdleDeadline) {
  lock_feed f{time_slice_lock{{}}};
  EXPECT_EQ(f.arrive().revisit_at, epoch + 5s);  // idle deadline first
  EXPECT_EQ(f.step(blocks(1), blocks(0), 4s).revisit_at, epoch + 9s);
  f.step(blocks(1), blocks(0), 24s);  // t = 28 s, active
  EXPECT_EQ(f.last.revisit_at, epoch + 30s);  // quantum end first
}

TEST(TimeSliceLock, KeepsTheLockWhileNobodyElseWaits) {
  lock_feed f{time_slice_lock{{}}};
  const rate_decision alone = f.step(std::nullopt, blocks(10), 1s);
  EXPECT_EQ(holder_of(alone), job_class::opportunistic);
  EXPECT_EQ(alone.revisit_at, never);
  f.step(std::nullopt, blocks(0), 100s);  // idle and past the quantum, but alone
  EXPECT_EQ(f.controller.holder(), std::optional<job_class>{job_class::opportunistic});
}

TEST(TimeSliceLock, FirstComerKeepsTheLockAgainstALaterProductionJob) {
  // nvshare ignores priority: the opportunistic job that came first holds the GPU for its
  // quantum even after a production job arrives.
  lock_feed f{time_slice_lock{{}}};
  f.step(std::nullopt, blocks(10), 10s);  // the opportunistic job takes the lock at t = 10 s
  const rate_decision arrived = f.step(blocks(0), blocks(10), 1s);
  EXPECT_EQ(holder_of(arrived), job_class::opportunistic);
  EXPECT_EQ(arrived.revisit_at, epoch + 16s);
  for (int i = 0; i < 28; ++i) f.step(blocks(0), blocks(10), 1s);  // t = 39 s
  EXPECT_EQ(holder_of(f.last), job_class::opportunistic);
  EXPECT_EQ(holder_of(f.step(blocks(0), blocks(10), 1s)), job_class::production);  // t = 40 s
}

TEST(TimeSliceLock, DepartingHolderPassesTheLockAtOnce) {
  lock_feed f{time_slice_lock{{}}};
  f.arrive();
  EXPECT_EQ(holder_of(f.step(std::nullopt, blocks(0), 1s)), job_class::opportunistic);
  const rate_decision empty = f.step(std::nullopt, std::nullopt, 1s);
  EXPECT_EQ(empty.share, gpu_share{time_sliced{}});
  EXPECT_EQ(f.controller.holder(), std::nullopt);
}

TEST(TimeSliceLock, RejectsNonPositiveDurations) {
  const auto message = [](time_slice_lock::config cfg) -> std::string {
    try {
      time_slice_lock c{cfg};
    } catch (const config_error& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(message({.quantum = 0s}).find("time_slice_lock: quantum must be positive"),
            std::string::npos);
  EXPECT_NE(message({.idle_release = -1s}).find("time_slice_lock: idle_release must be positive"),
            std::string::npos);
  EXPECT_EQ(message({.quantum = 10s, .idle_release = 1s}), "accepted");
}

}  // namespace
}  // namespace tgs::test
