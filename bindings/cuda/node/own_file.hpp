// SPDX-License-Identifier: Apache-2.0
/// @file
/// The files tgs-node keeps beside its socket for its successor (the record of held processes,
/// the job profiles): written whole through the socket's folder under a name nobody can
/// pre-create, and read back only if they are still the node's own.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tgs::cuda::node {

/// The text of `path` if it is a regular file (not a link) owned by the node's user, writable by
/// no one else and at most `max_bytes`. Nothing with `why` empty when there is no such file;
/// nothing with `why` saying what is wrong with it otherwise.
[[nodiscard]] std::optional<std::string> read_own_file(const std::string& path, std::size_t max_bytes,
                                                       std::string& why);

/// Replaces `path` with `text` (mode 0600): a temporary file of a random name made exclusively in
/// its folder, then renamed over it, so a reader sees the old file or the new one and no name
/// another user of a shared folder could pre-create stands in the way. Empty, or why not.
[[nodiscard]] std::string replace_own_file(const std::string& path, std::string_view text);

}  // namespace tgs::cuda::node
