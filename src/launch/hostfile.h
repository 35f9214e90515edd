// Hostfiles of `tandem launch --launcher ssh -H FILE`, in the forms MPI and
// MXNet users already write:
//
//   # comment            (a '#' starts a comment anywhere on a line)
//   node1                one slot
//   node2:4              four slots
//   node3 slots=2        two slots (Open MPI's form)
//   alice@node4:2        a login name for ssh
//   [fd00::5]:2          an IPv6 literal in brackets
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::launch {

/// One line of a hostfile. Thread-safety: a value type.
struct HostSlots {
  std::string login;  ///< what ssh is given: "alice@node4", "node1", "fd00::5"
  std::string host;   ///< the address part: "node4", "node1", "fd00::5"
  int slots = 1;      ///< >= 1
};

/// Parses `text`, read from `source` (named in errors). Throws
/// InvalidArgument naming the source, the line number and what is wrong (a
/// bad slot count, an unknown option, a repeated host, no host at all).
std::vector<HostSlots> ParseHostfile(std::string_view text, const std::string& source);

/// Reads and parses the file `path`. Throws IoError when it cannot be read,
/// InvalidArgument as ParseHostfile.
std::vector<HostSlots> ReadHostfile(const std::string& path);

}  // namespace tandem::launch
