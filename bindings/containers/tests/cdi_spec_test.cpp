// SPDX-License-Identifier: Apache-2.0
// Tests of the container edits and the CDI spec: one device per GPU and class, the paths each
// names, valid JSON under CDI's naming rules, and clear refusals.
#include "cdi_spec.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tgs::containers {
namespace {

using nlohmann::json;

json parse(const std::string& text) { return json::parse(text); }

/// The device named `name` in a parsed spec.
const json& device(const json& spec, const std::string& name) {
  for (const json& d : spec.at("devices")) {
    if (d.at("name") == name) return d;
  }
  throw std::out_of_range("no device " + name);
}

TEST(ContainerEdits, NamesGpuAndClass) {
  EXPECT_EQ(node_socket_name(0, job_class::production), "gpu0-production.sock");
  EXPECT_EQ(node_socket_name(12, job_class::opportunistic), "gpu12-opportunistic.sock");
  EXPECT_EQ(cdi_device_name(3, job_class::opportunistic), "3-opportunistic");
  EXPECT_EQ(qualified_cdi_device(0, job_class::opportunistic), "tgs.io/gpu=0-opportunistic");
  EXPECT_EQ(nvidia_cdi_device(7), "nvidia.com/gpu=7");
  EXPECT_EQ(node_socket_path({.interposer = "/x", .socket_dir = "/run/tgs//"}, 1, job_class::production),
            "/run/tgs/gpu1-production.sock");
}

TEST(ContainerEdits, LoadTheInterposerAndMountTheClassSocket) {
  const host_paths paths{.interposer = "/opt/tgs/lib/libtgs-intercept.so", .socket_dir = "/var/run/tgs"};
  const container_edits e = edits_for(2, job_class::opportunistic, paths);
  EXPECT_EQ(e.env, (std::vector<env_var>{{"LD_PRELOAD", "/usr/lib/tgs/libtgs-intercept.so"},
                                         {"TGS_NODE_SOCKET", "/run/tgs/tgs.sock"}}));
  EXPECT_EQ(e.mounts, (std::vector<mount>{
                          {"/opt/tgs/lib/libtgs-intercept.so", "/usr/lib/tgs/libtgs-intercept.so", true},
                          {"/var/run/tgs/gpu2-opportunistic.sock", "/run/tgs/tgs.sock", false}}));
}

TEST(ContainerEdits, WithMpsMountTheGpusPipeFolderAndTheHostsSharedMemory) {
  host_paths paths{.interposer = "/usr/lib/tgs/libtgs-intercept.so", .socket_dir = "/run/tgs"};
  paths.mps_pipe_dir = "/run/tgs/mps/gpu%u/pipe";
  EXPECT_EQ(mps_pipe_dir_of(paths, 3), "/run/tgs/mps/gpu3/pipe");
  const container_edits e = edits_for(3, job_class::production, paths);
  ASSERT_EQ(e.mounts.size(), 4U);
  // At the host's path: tgs-node tells the job that path as its CUDA_MPS_PIPE_DIRECTORY.
  EXPECT_EQ(e.mounts[2], (mount{"/run/tgs/mps/gpu3/pipe", "/run/tgs/mps/gpu3/pipe", false}));
  EXPECT_EQ(e.mounts[3], (mount{"/dev/shm", "/dev/shm", false}));
  EXPECT_EQ(edits_for(3, job_class::production, host_paths{}).mounts.size(), 2U) << "no MPS, no MPS mounts";
}

TEST(CdiSpec, IsJsonWithKindAndVersion) {
  const json spec = parse(render_cdi_spec({.gpus = {0}, .paths = {}}));
  EXPECT_EQ(spec.at("cdiVersion"), "0.5.0");
  EXPECT_EQ(spec.at("kind"), "tgs.io/gpu");
  // CDI's kind rule: a DNS-subdomain prefix, a slash, a name of alphanumerics, '-', '_', '.'.
  EXPECT_TRUE(std::regex_match(spec.at("kind").get<std::string>(),
                               std::regex(R"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)")));
  EXPECT_EQ(spec.size(), 3U) << "only cdiVersion, kind and devices: unknown fields make a runtime refuse the spec";
}

TEST(CdiSpec, OneDevicePerGpuAndClass) {
  const json spec = parse(render_cdi_spec({.gpus = {0, 1, 3}, .paths = {}}));
  std::vector<std::string> names;
  for (const json& d : spec.at("devices")) names.push_back(d.at("name"));
  EXPECT_EQ(names, (std::vector<std::string>{"0-production", "0-opportunistic", "1-production", "1-opportunistic",
                                             "3-production", "3-opportunistic"}));
  // CDI's device name rule; a leading digit needs spec version 0.5.0 or later.
  for (const std::string& n : names) {
    EXPECT_TRUE(std::regex_match(n, std::regex("[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"))) << n;
  }
}

TEST(CdiSpec, EditsNameTheInstalledPathsPerGpuAndClass) {
  const host_paths paths{.interposer = "/usr/local/lib/tgs/libtgs-intercept.so", .socket_dir = "/srv/tgs"};
  const json spec = parse(render_cdi_spec({.gpus = {0, 5}, .paths = paths}));
  for (const char* cls : {"production", "opportunistic"}) {
    const json& edits = device(spec, std::string("5-") + cls).at("containerEdits");
    EXPECT_EQ(edits.at("env"), json::array({"LD_PRELOAD=/usr/lib/tgs/libtgs-intercept.so",
                                            "TGS_NODE_SOCKET=/run/tgs/tgs.sock"}));
    const json& mounts = edits.at("mounts");
    ASSERT_EQ(mounts.size(), 2U);
    EXPECT_EQ(mounts[0].at("hostPath"), "/usr/local/lib/tgs/libtgs-intercept.so");
    EXPECT_EQ(mounts[0].at("containerPath"), "/usr/lib/tgs/libtgs-intercept.so");
    EXPECT_EQ(mounts[0].at("options"), json::array({"ro", "nosuid", "nodev", "bind"}));
    EXPECT_EQ(mounts[1].at("hostPath"), std::string("/srv/tgs/gpu5-") + cls + ".sock");
    EXPECT_EQ(mounts[1].at("containerPath"), "/run/tgs/tgs.sock");
    EXPECT_EQ(mounts[1].at("options"), json::array({"nosuid", "nodev", "bind"}));
  }
}

TEST(CdiSpec, RefusesWhatNoRuntimeCouldUse) {
  auto message = [](const cdi_spec_options& o) {
    try {
      (void)render_cdi_spec(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({.gpus = {}, .paths = {}}), "CDI spec: no GPUs (a spec needs at least one device)");
  EXPECT_EQ(message({.gpus = {0, 1, 0}, .paths = {}}), "CDI spec: GPU 0 is listed twice");
  EXPECT_EQ(message({.gpus = {0}, .paths = {.interposer = "lib/libtgs-intercept.so", .socket_dir = "/run/tgs"}}),
            "CDI spec: the interposer must be an absolute path, got \"lib/libtgs-intercept.so\"");
  EXPECT_EQ(message({.gpus = {0}, .paths = {.interposer = "/usr/lib/tgs/libtgs-intercept.so", .socket_dir = ""}}),
            "CDI spec: the socket folder must be an absolute path, got \"\"");
}

class CdiSpecFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tgs-cdi-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(CdiSpecFile, WritesTheRenderedSpecAndNothingElse) {
  const cdi_spec_options options{.gpus = {0, 1}, .paths = {}};
  write_cdi_spec(dir_ / "tgs.json", options);
  std::ifstream in(dir_ / "tgs.json");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), render_cdi_spec(options));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 1)
      << "the temporary file is renamed, never left behind";
  // Written again over itself: still one whole file.
  write_cdi_spec(dir_ / "tgs.json", {.gpus = {2}, .paths = {}});
  std::ifstream again(dir_ / "tgs.json");
  EXPECT_EQ(json::parse(again).at("devices").size(), 2U);
}

TEST_F(CdiSpecFile, AMissingFolderIsNamed) {
  const std::filesystem::path file = dir_ / "no-such-folder" / "tgs.json";
  try {
    write_cdi_spec(file, {.gpus = {0}, .paths = {}});
    FAIL() << "wrote into a missing folder";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), file.string() + ": cannot write the CDI spec (No such file or directory)");
  }
}

// --- paths an attacker may plant (docs/trust-model.md, "Files and folders the node makes") ---------

std::string read_all(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string refusal(const std::filesystem::path& file, bool allow_shared = false) {
  try {
    write_cdi_spec(file, {.gpus = {0}, .paths = {}}, allow_shared);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "written";
}

TEST_F(CdiSpecFile, ASymlinkAtATemporaryNameIsNeverWrittenThrough) {
  // The file another user wants overwritten, and a symlink to it at the temporary name an earlier
  // writer used (`<file>.tmp-<pid>`), and at the spec's own name.
  const std::filesystem::path victim = dir_ / "victim";
  {
    std::ofstream(victim) << "root's own file\n";
  }
  std::filesystem::permissions(victim, std::filesystem::perms(0600));
  std::filesystem::create_symlink(victim, dir_ / ("tgs.json.tmp-" + std::to_string(::getpid())));
  std::filesystem::create_symlink(victim, dir_ / ".tgs.json.tmp-");
  std::filesystem::create_symlink(victim, dir_ / "tgs.json");
  const cdi_spec_options options{.gpus = {0}, .paths = {}};
  write_cdi_spec(dir_ / "tgs.json", options);
  EXPECT_EQ(read_all(victim), "root's own file\n");
  EXPECT_EQ(std::filesystem::status(victim).permissions(), std::filesystem::perms(0600));
  // The symlink at the spec's name is replaced by the spec (rename replaces the name, not its target).
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(dir_ / "tgs.json")));
  EXPECT_EQ(read_all(dir_ / "tgs.json"), render_cdi_spec(options));
  EXPECT_EQ(std::filesystem::status(dir_ / "tgs.json").permissions(), std::filesystem::perms(0644))
      << "readable by every runtime, whatever the umask";
  EXPECT_TRUE(std::filesystem::is_symlink(dir_ / ("tgs.json.tmp-" + std::to_string(::getpid()))));
  // Nothing left behind but the planted files and the spec.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 4);
}

TEST_F(CdiSpecFile, AFolderThatIsASymlinkIsNotFollowed) {
  std::filesystem::create_directories(dir_ / "real");
  std::filesystem::create_directory_symlink(dir_ / "real", dir_ / "cdi");
  EXPECT_EQ(refusal(dir_ / "cdi" / "tgs.json"), (dir_ / "cdi" / "tgs.json").string() + ": cannot write the CDI spec (" +
                                                    (dir_ / "cdi").string() + " is a symlink: refusing to follow it)");
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "real"));
}

TEST_F(CdiSpecFile, AFolderOthersMayWriteToIsRefusedUnlessAllowed) {
  std::filesystem::permissions(dir_, std::filesystem::perms(0777));
  const std::string message = refusal(dir_ / "tgs.json");
  EXPECT_NE(message.find(dir_.string() + " (mode 0777) is writable by users other than its owner"), std::string::npos)
      << message;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "tgs.json"));
  EXPECT_EQ(refusal(dir_ / "tgs.json", true), "written");
}

TEST_F(CdiSpecFile, AFolderOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the folder to uid 65534";
  ASSERT_EQ(::chown(dir_.c_str(), 65534, 65534), 0);
  const std::string message = refusal(dir_ / "tgs.json", true);
  EXPECT_NE(message.find(dir_.string() + " is owned by uid 65534"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "tgs.json"));
}

}  // namespace
}  // namespace tgs::containers
