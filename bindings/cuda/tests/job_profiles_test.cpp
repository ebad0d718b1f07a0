// SPDX-License-Identifier: Apache-2.0
// The job profiles a node keeps across its restarts: written and read back as the same store,
// anything else refused with the line that is wrong; and the node's own-file reader.
#include "job_profiles.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "own_file.hpp"

namespace tgs::cuda::node {
namespace {

profile_key key(uid_t uid, std::uint64_t hash, std::string place = "") {
  return {uid, std::move(place), 2049, 123456, hash};
}

TEST(JobProfiles, WrittenAndReadBackTheyAreTheSameStoreInTheSameOrder) {
  job_profiles store;
  job_profile& a = store.at(key(1000, 1, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"));
  a.longest_kernel = std::chrono::milliseconds{150};
  a.peak_bytes = bytes{5ULL << 30};
  a.runs = 3;
  job_profile& b = store.at(key(0, 2));
  b.hurt_as_mps_client = true;
  b.runs = 1;
  (void)store.find(key(1000, 1, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"));  // a is now the most recent
  const std::string text = format_profiles(store);
  std::string why;
  std::optional<job_profiles> back = parse_profiles(text, why);
  ASSERT_TRUE(back) << why << "\n" << text;
  EXPECT_EQ(format_profiles(*back), text);
  const auto order = back->by_use();
  ASSERT_EQ(order.size(), 2U);
  EXPECT_EQ(order.front().first.uid, 0U) << "the least recently used first";
  const std::optional<job_profile> p = back->find(key(1000, 1, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->longest_kernel, std::chrono::milliseconds{150});
  EXPECT_EQ(p->peak_bytes, bytes{5ULL << 30});
  EXPECT_EQ(p->runs, 3U);
  EXPECT_FALSE(back->find(key(0, 2))->longest_kernel);
  EXPECT_TRUE(back->find(key(0, 2))->hurt_as_mps_client);
}

TEST(JobProfiles, AnythingElseIsRefusedWithTheLineThatIsWrong) {
  const std::string header = "tgs-node job profiles 1\n";
  const std::string good = "1000 - 1 2 3 - - 0 0 1\n";
  std::string why;
  EXPECT_TRUE(parse_profiles(header + good, why)) << why;
  const std::pair<std::string, std::string> cases[] = {
      {"", "empty"},
      {"tgs-node job profiles 2\n", "line 1: not"},
      {header + "1000 - 1 2 3 - - 0 0\n", "line 2: 9 fields, not 10"},
      {header + "x - 1 2 3 - - 0 0 1\n", "line 2: a uid"},
      {header + "4294967296 - 1 2 3 - - 0 0 1\n", "line 2: a uid"},
      {header + "1000 ../etc 1 2 3 - - 0 0 1\n", "line 2: a place"},
      {header + "1000 - 1 2 3 -5 - 0 0 1\n", "line 2: a longest kernel"},
      {header + "1000 - 1 2 3 - 9223372036854775808 0 0 1\n", "line 2: a longest kernel"},
      {header + "1000 - 1 2 3 - - 2 0 1\n", "line 2: a hurt flag"},
      {header + good + good, "line 3: a profile listed twice"},
      {header + "1000 - 1 2 3 - - 0 0 1", "line 2: no end of line"},
  };
  for (const auto& [text, message] : cases) {
    EXPECT_FALSE(parse_profiles(text, why)) << text;
    EXPECT_NE(why.find(message), std::string::npos) << text << " -> " << why;
  }
}

TEST(JobProfiles, AFileOfMoreThanTheStoreHoldsKeepsItsMostRecentAndEachUsersShare) {
  std::string text = "tgs-node job profiles 1\n";
  for (int i = 0; i < 300; ++i) text += "1000 - 1 2 " + std::to_string(i) + " - - 0 0 1\n";
  std::string why;
  const std::optional<job_profiles> read = parse_profiles(text, why);
  ASSERT_TRUE(read) << why;
  EXPECT_EQ(read->size(), 256U) << "256 per user";
  EXPECT_FALSE(read->by_use().front().first.command_hash < 44) << "the oldest went first";
}

TEST(OwnFile, IsReadOnlyIfItIsTheNodesOwnAndSmallEnough) {
  const std::string dir = ::testing::TempDir() + "own-file-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0700);
  const std::string path = dir + "/record";
  std::string why;
  EXPECT_FALSE(read_own_file(path, 100, why));
  EXPECT_EQ(why, "") << "no file is no trouble";
  ASSERT_EQ(replace_own_file(path, "hello\n"), "");
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  EXPECT_EQ(read_own_file(path, 100, why).value_or(""), "hello\n");
  EXPECT_FALSE(read_own_file(path, 3, why));
  EXPECT_EQ(why, "larger than 3 bytes");
  ::chmod(path.c_str(), 0622);
  EXPECT_FALSE(read_own_file(path, 100, why));
  EXPECT_EQ(why, "writable by others (mode 0622)");
  const std::string link = dir + "/link";
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  EXPECT_FALSE(read_own_file(link, 100, why));
  EXPECT_EQ(why, "a symbolic link");
  ::unlink(link.c_str());
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace tgs::cuda::node
