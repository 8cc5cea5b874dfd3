// Model configs: config/models/*.yaml <-> ModelSpec (runtime/model_spec.h). The schema, with every key,
// type, default and range, is documented in docs/config.md. Text goes through base/yaml_guard before
// yaml-cpp sees it; every error is a kConfigError "<file>:<line>:<col>: <key.path>: <reason>".
#pragma once

#include <string>

#include "runtime/model_spec.h"
#include "base/status.h"

namespace edgevit {

// Reads and validates a model config. weights.path and labels are resolved against the YAML's directory
// (made absolute), so the spec works from any current directory. source_path is `path` as given.
Result<ModelSpec> load_model_spec(const std::string& path);

// Same, from text. `display_name` prefixes error messages (usually the file path); relative paths in the
// text are resolved against `base_dir` (used as given: pass an absolute directory for absolute results).
Result<ModelSpec> parse_model_spec(const std::string& yaml_text, const std::string& display_name,
                                   const std::string& base_dir);

// Checks the cross-field rules the loader enforces (divisibility, list lengths, ranges) on a spec built
// in memory, e.g. by the importer; `origin` names it in messages. kConfigError on failure.
Status validate_model_spec(const ModelSpec& spec, const std::string& origin);

// The YAML text of `spec` in schema order, every key written (defaults included; `name` only when not
// empty, so that the file stem names it). Paths are written
// relative to `base_dir` when both are absolute or both relative, else as given.
Result<std::string> model_spec_to_yaml(const ModelSpec& spec, const std::string& base_dir);

// Writes model_spec_to_yaml(spec, <directory of path>) to `path` (kIoError on failure). A spec loaded from
// a file and saved elsewhere loads back equal (except source_path).
Status save_model_spec(const ModelSpec& spec, const std::string& path);

// Field-by-field equality of everything a config holds (source_path excluded); doubles compare exactly.
bool same_model_spec(const ModelSpec& a, const ModelSpec& b);

}  // namespace edgevit
