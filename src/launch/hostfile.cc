#include "launch/hostfile.h"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "tandem/error.h"

namespace tandem::launch {
namespace {

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

int ParseSlots(std::string_view text, const std::string& where) {
  int slots = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), slots);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || slots < 1 ||
      slots > 4096) {
    throw InvalidArgument(
        fmt::format("{}: slot count '{}' is not a number in 1..4096", where, text));
  }
  return slots;
}

// The hosts of `text`, one per `separator`-ended item, which errors call
// "<source> <item> <number>".
std::vector<HostSlots> ParseHosts(std::string_view text, const std::string& source, char separator,
                                  const char* item) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  std::istringstream in{std::string(text)};
  std::string raw;
  for (int number = 1; std::getline(in, raw, separator); ++number) {
    std::string where = fmt::format("{} {} {}", source, item, number);
    std::string line = Trim(std::string_view(raw).substr(0, raw.find('#')));
    if (line.empty()) continue;
    HostSlots h;
    std::string spec = line;
    size_t space = line.find_first_of(" \t");
    if (space != std::string::npos) {
      spec = line.substr(0, space);
      std::string option = Trim(std::string_view(line).substr(space));
      if (option.rfind("slots=", 0) != 0 || option.find_first_of(" \t") != std::string::npos) {
        throw InvalidArgument(
            fmt::format("{}: '{}' is not understood (write 'host', 'host:N' or 'host slots=N')",
                        where, option));
      }
      h.slots = ParseSlots(std::string_view(option).substr(6), where);
    }
    std::string address = spec;
    std::string user;
    if (size_t at = spec.find('@'); at != std::string::npos) {
      user = spec.substr(0, at + 1);
      address = spec.substr(at + 1);
    }
    if (!address.empty() && address.front() == '[') {
      size_t close = address.find(']');
      if (close == std::string::npos)
        throw InvalidArgument(fmt::format("{}: '[' without ']'", where));
      std::string rest = address.substr(close + 1);
      address = address.substr(1, close - 1);
      if (!rest.empty()) {
        if (rest.front() != ':' || space != std::string::npos) {
          throw InvalidArgument(fmt::format("{}: '{}' after the address is not ':N'", where, rest));
        }
        h.slots = ParseSlots(std::string_view(rest).substr(1), where);
      }
    } else if (size_t colon = address.find(':'); colon != std::string::npos) {
      if (space != std::string::npos) {
        throw InvalidArgument(
            fmt::format("{}: give the slots once ('host:N' or 'host slots=N')", where));
      }
      h.slots = ParseSlots(std::string_view(address).substr(colon + 1), where);
      address = address.substr(0, colon);
    }
    if (address.empty()) throw InvalidArgument(fmt::format("{}: no host name", where));
    h.host = address;
    h.login = user + address;
    if (!seen.insert(h.login).second) {
      throw InvalidArgument(
          fmt::format("{}: host {} is listed twice (give it more slots instead)", where, h.login));
    }
    hosts.push_back(std::move(h));
  }
  if (hosts.empty()) throw InvalidArgument(fmt::format("{} names no host", source));
  return hosts;
}

}  // namespace

std::vector<HostSlots> ParseHostfile(std::string_view text, const std::string& source) {
  return ParseHosts(text, source, '\n', "line");
}

std::vector<HostSlots> ParseHostList(const std::string& list) {
  return ParseHosts(list, "-H " + list, ',', "entry");
}

std::vector<HostSlots> ReadHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw IoError(fmt::format("cannot read the hostfile {}: {}", path, std::strerror(errno)));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseHostfile(buffer.str(), path);
}

}  // namespace tandem::launch
