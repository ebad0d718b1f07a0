// SPDX-License-Identifier: Apache-2.0
/// @file
/// The record of the processes tgs-node holds, `<socket>.paused`: written before the node holds a
/// process, read by the next node on the socket, which releases what it lists
/// (docs/operator-guide.md, "Processes that never registered"). Its text:
///
/// ```
/// tgs-node paused v2
/// 4242 123456 /system.slice/job.scope
/// 4343 123999
/// ```
///
/// one `PID START [CGROUP]` line per process: its pid, its start time (field 22 of
/// `/proc/<pid>/stat`, which tells a recycled pid apart) and, for a process the node froze, the
/// cgroup it came from and goes back to. A `v1` record (no cgroups) is still read. The record is
/// the node's own file, but a reader trusts nothing in it it has not checked: anything other than
/// exactly this format is refused, with why.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

namespace tgs::cuda::node {

/// The processes a record lists: (pid, start time, cgroup; empty when held by SIGSTOP).
using held_entries = std::set<std::tuple<pid_t, std::uint64_t, std::string>>;

/// A record larger than this is not read (a node holds a few processes; this is thousands).
inline constexpr std::size_t held_record_max_bytes = 64 * 1024;

/// The record's text for `entries` (whose cgroups `parse_held_record` would accept).
[[nodiscard]] std::string format_held_record(const held_entries& entries);

/// The entries of a record's text; empty, with why in `why` ("malformed: line 3 is not ..."),
/// when it is not exactly a record.
[[nodiscard]] std::optional<held_entries> parse_held_record(std::string_view text, std::string& why);

}  // namespace tgs::cuda::node
