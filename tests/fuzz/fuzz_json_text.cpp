// libFuzzer target: the daemon's JSON text encoding of arbitrary bytes (serving/json_text.h), the
// path that took edgevitd down (issue #22: a failed reload's message quoted raw checkpoint bytes and
// health's dump() threw on them). Beyond "no crash":
//   - valid_utf8(bytes) is accepted by nlohmann's strict dump (the default that threw), and survives a
//     dump/parse round trip unchanged;
//   - bytes that are already valid UTF-8 come back unchanged; otherwise the output differs;
//   - utf8_prefix_bytes cuts valid text at most `max` bytes long, on a character boundary (the prefix is
//     still valid), and takes the whole next character only when it fits;
//   - dump_json never throws, even on the raw bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "serving/json_text.h"

namespace {

using edgevit::daemon::dump_json;
using edgevit::daemon::utf8_prefix_bytes;
using edgevit::daemon::utf8_sequence_bytes;
using edgevit::daemon::valid_utf8;

void check(bool ok) {
  if (!ok) std::abort();
}

// nlohmann's own verdict: dump() with the default (strict) handler throws on invalid UTF-8.
bool strict_dump_accepts(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string raw(reinterpret_cast<const char*>(data), size);
  const std::string text = valid_utf8(raw);
  check(strict_dump_accepts(text));
  const std::string dumped = nlohmann::json(text).dump();
  check(nlohmann::json::parse(dumped).get<std::string>() == text);
  const bool raw_valid = strict_dump_accepts(raw);
  check(raw_valid == (text == raw));

  // Cut points: every length up to 70 (labels are cut at 64) and the error message limit.
  for (size_t max : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{63}, size_t{64}, size_t{65}, size_t{1024}}) {
    const size_t cut = utf8_prefix_bytes(text, max);
    check(cut <= max && cut <= text.size());
    check(strict_dump_accepts(text.substr(0, cut)));
    if (cut < text.size()) {
      const size_t next = utf8_sequence_bytes(reinterpret_cast<const unsigned char*>(text.data()) + cut, text.size() - cut);
      check(next > 0 && cut + next > max);
    }
  }

  nlohmann::ordered_json j;
  j["message"] = raw;  // stored as is: only dump() looks at the encoding
  j["nested"] = {{"label", raw}, {"list", {raw, text}}};
  const std::string out = dump_json(j);
  check(strict_dump_accepts(nlohmann::ordered_json::parse(out)["message"].get<std::string>()));
  return 0;
}
