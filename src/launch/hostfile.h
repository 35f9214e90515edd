// Hostfiles of `tandem launch --hostfile FILE` and host lists of `-H
// host1:2,host2:2`, in the forms MPI, Horovod and MXNet users already write
// (one host per line in a file, per comma in a list):
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

  bool operator==(const HostSlots&) const = default;
};

/// Parses `text`, read from `source` (named in errors). Throws
/// InvalidArgument naming the source, the line number and what is wrong (a
/// bad slot count, an unknown option, a repeated host, no host at all).
std::vector<HostSlots> ParseHostfile(std::string_view text, const std::string& source);

/// Parses horovodrun's and mpirun's `-H` list, "host1:2,host2:2" (each
/// entry as a hostfile line; a host without ":N" has one slot). Throws
/// InvalidArgument as ParseHostfile, naming "-H <list> entry <n>".
std::vector<HostSlots> ParseHostList(const std::string& list);

/// Reads and parses the file `path`. Throws IoError when it cannot be read,
/// InvalidArgument as ParseHostfile.
std::vector<HostSlots> ReadHostfile(const std::string& path);

}  // namespace tandem::launch
