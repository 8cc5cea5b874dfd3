// Text that reaches the daemon's answers (JSON and error frames) and the client's output: valid UTF-8 by
// construction. Error messages can quote bytes of a file (a checkpoint header, a label, a path) and
// nlohmann::json::dump() throws on invalid UTF-8, so every string goes through valid_utf8() before it is
// put in a JSON value, and dump_json() replaces whatever might still slip through instead of throwing.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace edgevit::daemon {

// Length of the well-formed UTF-8 sequence (RFC 3629: shortest form, no surrogates, <= U+10FFFF) that starts
// at `p` (`n` bytes available), or 0 when none starts there.
size_t utf8_sequence_bytes(const unsigned char* p, size_t n);

// A copy of `bytes` in which every byte that does not begin a well-formed sequence is replaced by U+FFFD
// (EF BF BD). Valid UTF-8 comes back unchanged.
std::string valid_utf8(std::string_view bytes);

// The longest prefix of `text` with at most `max_bytes` bytes that does not end inside a well-formed
// sequence (cuts labels and error messages on character boundaries).
size_t utf8_prefix_bytes(std::string_view text, size_t max_bytes);

// `j` as JSON text (indent -1: one line); invalid UTF-8 left in a string is replaced by U+FFFD, never thrown.
std::string dump_json(const nlohmann::ordered_json& j, int indent = -1);

}  // namespace edgevit::daemon
