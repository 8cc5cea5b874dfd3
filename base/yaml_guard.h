// Hardened YAML reading shared by every edgevit config (models, device profiles, the daemon).
//
// yaml-cpp parses recursively and expands aliases when the tree is walked, so hostile text can exhaust the
// stack (deep `[[[[` / `{{{{` / indentation nests) or the CPU/memory of whoever walks the tree (alias bombs).
// The text is therefore checked BEFORE yaml-cpp sees it (check_yaml_text, base/yaml_limits.cpp): a byte
// scan (valid UTF-8, no NUL/control bytes, no lone CR), then libyaml's event parser, which is
// non-recursive and fuzzed upstream, enforcing YamlLimits event by event and stopping at the first
// violation. Any libyaml syntax error refuses the text too, so yaml-cpp only ever sees text that a
// conforming YAML parser reads within the limits.
// Then ConfigMap reads the parsed tree strictly: every key must be known, every scalar of the expected
// type and range, duplicate keys are errors, and every message has the form
//   "<file>:<line>:<col>: <key.path>: <reason>"      (1-based line and column)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "base/status.h"

namespace edgevit {

struct YamlLimits {
  size_t max_bytes = 1 << 20;          // 1 MiB: configs are a few hundred bytes
  int max_depth = 64;                  // nested lists/mappings, the top-level mapping included; edgevit needs 3
  bool allow_aliases = false;          // anchors/aliases have no use in edgevit configs
  int max_documents = 1;               // `---` separated documents
  size_t max_nodes = 1 << 16;          // scalars, lists and mappings; an alias counts as the nodes it stands for
  size_t max_scalar_bytes = 1 << 16;   // one scalar's decoded text (paths and names are far shorter)
  int max_aliases = 1024;              // alias uses, when allow_aliases
};

// Checks `text` against `limits` in O(text.size()) time, without recursion, before any tree is built:
// bytes, libyaml syntax, depth, node count, scalar length, anchors/aliases and their expansion, the number
// of documents, explicit keys ('? ', which yaml-cpp 0.7 reads differently), and a top level that is a
// mapping (or empty). Errors are kConfigError "<display_name>:<line>:<col>: <reason>"; a syntax error
// carries libyaml's problem text.
Status check_yaml_text(const std::string& text, const std::string& display_name,
                       const YamlLimits& limits = YamlLimits());

// Reads a whole config file through ReadOnlyFile (base/file_io.h), refusing files larger than max_bytes
// before reading them (kNotFound when missing, kIoError when unreadable or not a regular file: a FIFO, a
// device or a directory; kConfigError when too large).
Result<std::string> read_config_file(const std::string& path, size_t max_bytes = YamlLimits().max_bytes);

// check_yaml_text, then yaml-cpp, with its exceptions turned into kConfigError. Rejects an empty
// document (nothing but comments/whitespace), a top level that is not a mapping, and duplicate keys at
// any level.
Result<YAML::Node> parse_yaml_mapping(const std::string& text, const std::string& display_name,
                                      const YamlLimits& limits = YamlLimits());

// "<display_name>:<line>:<col>: <key_path>: <reason>" as a kConfigError; an invalid mark prints no
// position and an empty key_path prints no key.
Status yaml_error(const std::string& display_name, const YAML::Mark& mark, const std::string& key_path,
                  const std::string& reason);

// Strict, typed view of one YAML mapping. Getters look up `key`; when it is absent they leave *out as it
// is (the caller's default) and return Ok unless `required`; has() tells whether it was given. Each key
// asked for is remembered, so finish() can reject the keys nobody asked for.
// The ConfigMap keeps a reference-counted handle to the node; the caller keeps nothing alive.
class ConfigMap {
 public:
  // `node` must be a mapping (use parse_yaml_mapping or child()); `key_path` is "" at the top level.
  ConfigMap() = default;
  ConfigMap(YAML::Node node, std::string display_name, std::string key_path);

  bool has(const std::string& key) const;
  // Whether `key` is given as a sequence (for keys that take a number or a list, e.g. img_size: N | [H, W]).
  bool is_sequence(const std::string& key) const;
  const std::string& key_path() const { return key_path_; }

  // Plain (unquoted) integer scalar in [lo, hi]. A float, a quoted string or a list is a type error.
  Status get_int(const std::string& key, bool required, int64_t lo, int64_t hi, int64_t* out);
  Status get_int(const std::string& key, bool required, int64_t lo, int64_t hi, int* out);
  // Plain finite number in [lo, hi] (integers accepted). lo_open/hi_open exclude the bound.
  Status get_double(const std::string& key, bool required, double lo, double hi, double* out,
                    bool lo_open = false, bool hi_open = false);
  // Plain `true` / `false` (also True/TRUE/False/FALSE); yes/no/on/off are rejected as ambiguous.
  Status get_bool(const std::string& key, bool required, bool* out);
  // Any scalar except null; non-empty unless allow_empty.
  Status get_string(const std::string& key, bool required, std::string* out, bool allow_empty = false);
  // A string from `choices` (value, enumerator); the message lists the choices.
  template <typename E>
  Status get_enum(const std::string& key, bool required,
                  const std::vector<std::pair<const char*, E>>& choices, E* out);
  // A sequence of plain numbers, each in [lo, hi] (lo_open excludes lo).
  Status get_double_list(const std::string& key, bool required, double lo, double hi, bool lo_open,
                         std::vector<double>* out);
  // A sequence of names, each one of `choices` and none twice (index into choices per item, in file order);
  // the message names the item and lists the choices.
  Status get_enum_list(const std::string& key, bool required, const std::vector<const char*>& choices,
                       std::vector<size_t>* out);
  // A nested mapping. When absent and !required, *out is an empty mapping at that path.
  Status get_map(const std::string& key, bool required, ConfigMap* out);

  // kConfigError for the first key never asked for, naming the keys that are allowed here.
  Status finish() const;

  // "<file>:<line>:<col>: <path.key>: <reason>" at the key's value (or at this mapping if absent).
  Status error(const std::string& key, const std::string& reason) const;

 private:
  struct Entry {
    std::string key;
    YAML::Node key_node;
    YAML::Node value;
  };

  const YAML::Node* find(const std::string& key) const;
  void remember(const std::string& key);
  // The scalar text of `key`; *present is false when absent (an error if required) and a non-scalar
  // value is a type error naming `expected`.
  Status scalar_text(const std::string& key, bool required, const char* expected, bool* present,
                     std::string* text);
  Status check_number(const std::string& key, const std::string& s, bool plain, double lo, double hi,
                      bool lo_open, bool hi_open, double* out) const;
  Status get_enum_index(const std::string& key, bool required, const std::vector<const char*>& names,
                        size_t* index);
  std::string path_of(const std::string& key) const;

  YAML::Node node_;
  YAML::Mark mark_;  // where errors about this mapping point (the parent key when the section is absent)
  std::string display_name_;
  std::string key_path_;
  std::vector<Entry> entries_;     // in file order
  std::vector<std::string> asked_;  // keys the schema knows, in asking order
};

template <typename E>
Status ConfigMap::get_enum(const std::string& key, bool required,
                           const std::vector<std::pair<const char*, E>>& choices, E* out) {
  std::vector<const char*> names;
  names.reserve(choices.size());
  for (const auto& c : choices) names.push_back(c.first);
  size_t index = choices.size();
  EV_RETURN_IF_ERROR(get_enum_index(key, required, names, &index));
  if (index < choices.size()) *out = choices[index].second;
  return Status::Ok();
}

// Shortest decimal text that parses back to exactly `v`, always with a '.' or exponent ("4.0",
// "1e-06"), for writers that must round-trip.
std::string format_double_exact(double v);

}  // namespace edgevit
