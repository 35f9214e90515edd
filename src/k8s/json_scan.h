// A single pass over a job description's JSON text, before nlohmann::json
// parses it, for what a parser should never be handed or would report without
// a field's name: nesting deeper than a limit (a recursive walk of the parsed
// value, such as dump(), would overflow the stack) and numbers beyond a
// double's range (nlohmann::json throws out_of_range 406 for them). It also
// names the JSON path at a byte, so that a syntax error can say where it is.
//
// The scan tracks only brackets, strings, keys and commas; it does not
// validate the text, which is the parser's work afterwards. On malformed text
// it still ends, and what it reports is then a best effort.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::k8s {

/// What ScanJsonText found first in the text, in the order of the text.
struct JsonScanFinding {
  enum class Kind {
    kNone,            ///< nothing: the parser may take the text
    kTooDeep,         ///< an array or object opens below `max_depth` others
    kNumberOverflow,  ///< a number whose magnitude is beyond a double's
  };
  Kind kind = Kind::kNone;
  size_t byte = 0;    ///< 1-based: the opening bracket, or the number's first character
  size_t line = 0;    ///< 1-based line of `byte`
  size_t column = 0;  ///< 1-based column (in bytes) of `byte`
  /// The JSON path of the value at `byte`, e.g. "env.A[0][0][0][0]..."
  /// (at most kMaxPathParts parts, then "..."); "" for the top-level value.
  std::string path;
  /// kNumberOverflow: the number as written, e.g. "1e400"; one longer than
  /// kMaxTokenShown characters is cut there and ends in "...".
  std::string token;
};

/// How many parts (keys, indices) a reported path shows before "...".
inline constexpr size_t kMaxPathParts = 6;

/// How many characters of an overflowing number a finding keeps.
inline constexpr size_t kMaxTokenShown = 40;

/// Scans `text` for the first array or object nested deeper than `max_depth`
/// (the top-level value is at depth 1) and the first number that overflows a
/// double, whichever comes first. Never recurses; any thread; never throws
/// except std::bad_alloc.
JsonScanFinding ScanJsonText(std::string_view text, size_t max_depth);

/// The JSON path of the value being read at 1-based byte `byte` of `text`
/// (the key last read when between members), shortened like
/// JsonScanFinding::path. Meant for a parser's error position.
std::string JsonPathAt(std::string_view text, size_t byte);

}  // namespace tandem::k8s
