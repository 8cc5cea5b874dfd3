// The typed side of base/yaml_guard.h: parse_yaml_mapping (after check_yaml_text, base/yaml_limits.cpp,
// has checked the text) and ConfigMap, the strict schema reader.
#include "base/yaml_guard.h"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cmath>
#include <locale>
#include <sstream>

#include "base/file_io.h"

namespace edgevit {
namespace {

const char* type_name(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "null (empty value)";
    case YAML::NodeType::Scalar: return "a scalar";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Undefined: return "nothing";
  }
  return "nothing";
}

bool is_plain(const YAML::Node& node) { return node.Tag() == "?"; }

// Strict decimal integer: [+-]?[0-9]+ without overflow.
bool parse_int64(const std::string& s, int64_t* out) {
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i >= s.size()) return false;
  uint64_t v = 0;
  const uint64_t limit = neg ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    const uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (v > (limit - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return true;
}

// Locale-independent finite number ("1e-6", "4", "-0.5"); rejects YAML's .inf/.nan and hex.
bool parse_double(const std::string& s, double* out) {
  if (s.empty() || s.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
  std::istringstream in(s);
  in.imbue(std::locale::classic());
  double v = 0;
  in >> v;
  if (in.fail() || !in.eof() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool looks_numeric(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789+-.eE") == std::string::npos &&
         s.find_first_of("0123456789") != std::string::npos;
}

std::string shown_text(const std::string& s) {
  std::string shown = s.size() > 40 ? s.substr(0, 40) + "..." : s;
  return "'" + shown + "'";
}

std::string format_range_value(double v) { return format_double_exact(v); }

}  // namespace

Result<std::string> read_config_file(const std::string& path, size_t max_bytes) {
  EV_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::open(path, "config file"));
  if (file.size() > static_cast<int64_t>(max_bytes))
    return config_error(path + ": file is larger than the " + std::to_string(max_bytes) +
                        "-byte limit for configs (" + std::to_string(file.size()) + " bytes)");
  return file.read_all(static_cast<int64_t>(max_bytes), StatusCode::kConfigError);
}

Status yaml_error(const std::string& display_name, const YAML::Mark& mark, const std::string& key_path,
                  const std::string& reason) {
  std::string m = display_name;
  if (!mark.is_null()) m += ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
  m += ": ";
  if (!key_path.empty()) m += key_path + ": ";
  return config_error(m + reason);
}

namespace {

// Counts documents without building nodes; remembers where the first one past the limit starts.
class DocumentCounter final : public YAML::EventHandler {
 public:
  explicit DocumentCounter(int limit) : limit_(limit) {}
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++count_ == limit_ + 1) extra_ = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
  int count() const { return count_; }
  const YAML::Mark& extra() const { return extra_; }

 private:
  int limit_;
  int count_ = 0;
  YAML::Mark extra_ = YAML::Mark::null_mark();
};

// Duplicate keys (yaml-cpp keeps both and lookups see the first): walks every mapping iteratively.
Status check_duplicate_keys(const YAML::Node& root, const std::string& display_name) {
  // The tree is acyclic and its size bounded by max_nodes because check_yaml_text counted aliases expanded.
  std::vector<std::pair<YAML::Node, std::string>> todo{{root, ""}};
  while (!todo.empty()) {
    auto [node, path] = std::move(todo.back());
    todo.pop_back();
    if (node.IsMap()) {
      std::vector<std::pair<std::string, int>> seen;  // key -> 1-based line
      for (auto it = node.begin(); it != node.end(); ++it) {
        const YAML::Node key = it->first;  // a copy: it-> is a temporary proxy, a reference would dangle
        if (!key.IsScalar()) return yaml_error(display_name, key.Mark(), path, "keys must be plain strings");
        const std::string child = path.empty() ? key.Scalar() : path + "." + key.Scalar();
        for (const auto& s : seen) {
          if (s.first == key.Scalar()) {
            return yaml_error(display_name, key.Mark(), child,
                              "duplicate key (first given at line " + std::to_string(s.second) + ")");
          }
        }
        seen.emplace_back(key.Scalar(), key.Mark().line + 1);
        todo.emplace_back(it->second, child);
      }
    } else if (node.IsSequence()) {
      for (size_t k = 0; k < node.size(); ++k) todo.emplace_back(node[k], path + "[" + std::to_string(k) + "]");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<YAML::Node> parse_yaml_mapping(const std::string& text, const std::string& display_name,
                                      const YamlLimits& limits) {
  EV_RETURN_IF_ERROR(check_yaml_text(text, display_name, limits));
  // Never YAML::LoadAll: on a token its document parser does not consume (a stray ',' at the top level, in
  // every form findings 4, 6, 11, 13, 14 and 16 of docs/reliability.md took), yaml-cpp 0.7 returns an empty
  // document and LoadAll asks for the next one forever. Documents are counted through the parser directly,
  // at most max_documents + 1 of them, so any such input ends as "more than N documents" whether or not the
  // libyaml pass (check_yaml_text) refused it first; YAML::Load then builds the first document only.
  YAML::Node root;
  try {
    std::istringstream counted(text);
    YAML::Parser parser(counted);
    DocumentCounter counter(limits.max_documents);
    while (counter.count() <= limits.max_documents && parser.HandleNextDocument(counter)) {
    }
    if (counter.count() > limits.max_documents) {
      return yaml_error(display_name, counter.extra(), "",
                        "more than " + std::to_string(limits.max_documents) +
                            " YAML document(s) in one file (a '---', or text the YAML parser cannot place in "
                            "the first document, such as a stray ',' at the top level)");
    }
    if (counter.count() > 0) root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return yaml_error(display_name, e.mark, "", "YAML syntax error: " + e.msg);
  } catch (const std::exception& e) {
    return config_error(display_name + ": YAML parser failed: " + e.what());
  }
  if (!root.IsDefined() || root.IsNull()) {
    return config_error(display_name + ":1:1: empty document (expected a mapping of keys)");
  }
  if (!root.IsMap()) {
    return yaml_error(display_name, root.Mark(), "",
                      std::string("top level must be a mapping of keys, got ") + type_name(root));
  }

  EV_RETURN_IF_ERROR(check_duplicate_keys(root, display_name));
  return root;
}

ConfigMap::ConfigMap(YAML::Node node, std::string display_name, std::string key_path)
    : node_(std::move(node)), display_name_(std::move(display_name)), key_path_(std::move(key_path)) {
  mark_ = node_.Mark();
  if (node_.IsMap()) {
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      entries_.push_back(Entry{it->first.Scalar(), it->first, it->second});
    }
  }
}

bool ConfigMap::has(const std::string& key) const { return find(key) != nullptr; }

bool ConfigMap::is_sequence(const std::string& key) const {
  const YAML::Node* v = find(key);
  return v != nullptr && v->IsSequence();
}

const YAML::Node* ConfigMap::find(const std::string& key) const {
  for (const auto& e : entries_) {
    if (e.key == key) return &e.value;
  }
  return nullptr;
}

std::string ConfigMap::path_of(const std::string& key) const {
  return key_path_.empty() ? key : key_path_ + "." + key;
}

Status ConfigMap::error(const std::string& key, const std::string& reason) const {
  const YAML::Node* v = find(key);
  YAML::Mark mark = v != nullptr && !v->Mark().is_null() ? v->Mark() : mark_;
  if (v != nullptr && v->IsNull()) {
    for (const auto& e : entries_) {
      if (e.key == key) mark = e.key_node.Mark();
    }
  }
  return yaml_error(display_name_, mark, path_of(key), reason);
}

void ConfigMap::remember(const std::string& key) {
  if (std::find(asked_.begin(), asked_.end(), key) == asked_.end()) asked_.push_back(key);
}

Status ConfigMap::scalar_text(const std::string& key, bool required, const char* expected, bool* present,
                              std::string* text) {
  remember(key);
  *present = false;
  const YAML::Node* v = find(key);
  if (v == nullptr) {
    if (required) return error(key, std::string("required key is missing (expected ") + expected + ")");
    return Status::Ok();
  }
  if (!v->IsScalar()) return error(key, std::string("expected ") + expected + ", got " + type_name(*v));
  *present = true;
  *text = v->Scalar();
  return Status::Ok();
}

Status ConfigMap::get_int(const std::string& key, bool required, int64_t lo, int64_t hi, int64_t* out) {
  bool present = false;
  std::string s;
  EV_RETURN_IF_ERROR(scalar_text(key, required, "an integer", &present, &s));
  if (!present) return Status::Ok();
  if (!is_plain(*find(key))) return error(key, "expected an integer, got the string " + shown_text(s));
  int64_t v = 0;
  if (!parse_int64(s, &v)) {
    if (looks_numeric(s) && s.find_first_not_of("+-0123456789") == std::string::npos) {
      return error(key, "integer " + shown_text(s) + " is out of range [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "]");
    }
    double d = 0;
    if (parse_double(s, &d)) return error(key, "expected an integer, got the number " + s);
    return error(key, "expected an integer, got " + shown_text(s));
  }
  if (v < lo || v > hi) {
    return error(key, std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = v;
  return Status::Ok();
}

Status ConfigMap::get_int(const std::string& key, bool required, int64_t lo, int64_t hi, int* out) {
  int64_t v = *out;
  EV_RETURN_IF_ERROR(get_int(key, required, lo, hi, &v));
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status ConfigMap::check_number(const std::string& key, const std::string& s, bool plain, double lo, double hi,
                               bool lo_open, bool hi_open, double* out) const {
  if (!plain) return error(key, "expected a number, got the string " + shown_text(s));
  double v = 0;
  if (!parse_double(s, &v)) return error(key, "expected a finite number, got " + shown_text(s));
  const bool below = lo_open ? !(v > lo) : !(v >= lo);
  const bool above = hi_open ? !(v < hi) : !(v <= hi);
  if (below || above) {
    return error(key, s + " is out of range " + std::string(lo_open ? "(" : "[") + format_range_value(lo) + ", " +
                          format_range_value(hi) + (hi_open ? ")" : "]"));
  }
  *out = v;
  return Status::Ok();
}

Status ConfigMap::get_double(const std::string& key, bool required, double lo, double hi, double* out,
                             bool lo_open, bool hi_open) {
  bool present = false;
  std::string s;
  EV_RETURN_IF_ERROR(scalar_text(key, required, "a number", &present, &s));
  if (!present) return Status::Ok();
  return check_number(key, s, is_plain(*find(key)), lo, hi, lo_open, hi_open, out);
}

Status ConfigMap::get_bool(const std::string& key, bool required, bool* out) {
  bool present = false;
  std::string s;
  EV_RETURN_IF_ERROR(scalar_text(key, required, "true or false", &present, &s));
  if (!present) return Status::Ok();
  if (is_plain(*find(key))) {
    if (s == "true" || s == "True" || s == "TRUE") {
      *out = true;
      return Status::Ok();
    }
    if (s == "false" || s == "False" || s == "FALSE") {
      *out = false;
      return Status::Ok();
    }
  }
  return error(key, "expected true or false, got " + shown_text(s));
}

Status ConfigMap::get_string(const std::string& key, bool required, std::string* out, bool allow_empty) {
  bool present = false;
  std::string s;
  EV_RETURN_IF_ERROR(scalar_text(key, required, "a string", &present, &s));
  if (!present) {
    const YAML::Node* v = find(key);
    if (v != nullptr && v->IsNull() && allow_empty) out->clear();
    return Status::Ok();
  }
  if (s.empty() && !allow_empty) return error(key, "must not be empty");
  *out = s;
  return Status::Ok();
}

Status ConfigMap::get_enum_index(const std::string& key, bool required, const std::vector<const char*>& names,
                                 size_t* index) {
  std::string s;
  bool present = false;
  std::string allowed;
  for (const char* name : names) allowed += (allowed.empty() ? "" : ", ") + std::string(name);
  EV_RETURN_IF_ERROR(scalar_text(key, required, ("one of: " + allowed).c_str(), &present, &s));
  if (!present) return Status::Ok();
  for (size_t k = 0; k < names.size(); ++k) {
    if (s == names[k]) {
      *index = k;
      return Status::Ok();
    }
  }
  return error(key, shown_text(s) + " is not one of: " + allowed);
}

Status ConfigMap::get_double_list(const std::string& key, bool required, double lo, double hi, bool lo_open,
                                  std::vector<double>* out) {
  remember(key);
  const YAML::Node* v = find(key);
  if (v == nullptr) {
    if (required) return error(key, "required key is missing (expected a list of numbers)");
    return Status::Ok();
  }
  if (!v->IsSequence()) return error(key, std::string("expected a list of numbers, got ") + type_name(*v));
  std::vector<double> values;
  for (size_t k = 0; k < v->size(); ++k) {
    const YAML::Node item = (*v)[k];
    const std::string item_key = key + "[" + std::to_string(k) + "]";
    if (!item.IsScalar()) {
      return yaml_error(display_name_, item.Mark().is_null() ? v->Mark() : item.Mark(), path_of(item_key),
                        std::string("expected a number, got ") + type_name(item));
    }
    double d = 0;
    // Reuse the scalar checks with the item's own mark.
    ConfigMap one(YAML::Node(YAML::NodeType::Map), display_name_, key_path_);
    one.mark_ = item.Mark();
    EV_RETURN_IF_ERROR(one.check_number(item_key, item.Scalar(), is_plain(item), lo, hi, lo_open, false, &d));
    values.push_back(d);
  }
  *out = std::move(values);
  return Status::Ok();
}

Status ConfigMap::get_enum_list(const std::string& key, bool required, const std::vector<const char*>& choices,
                                std::vector<size_t>* out) {
  remember(key);
  std::string allowed;
  for (const char* c : choices) allowed += (allowed.empty() ? "" : ", ") + std::string(c);
  const YAML::Node* v = find(key);
  if (v == nullptr) {
    if (required) return error(key, "required key is missing (expected a list of: " + allowed + ")");
    return Status::Ok();
  }
  if (!v->IsSequence()) return error(key, "expected a list of: " + allowed + ", got " + type_name(*v));
  std::vector<size_t> values;
  for (size_t k = 0; k < v->size(); ++k) {
    const YAML::Node item = (*v)[k];
    const std::string item_key = key + "[" + std::to_string(k) + "]";
    const YAML::Mark mark = item.Mark().is_null() ? v->Mark() : item.Mark();
    if (!item.IsScalar())
      return yaml_error(display_name_, mark, path_of(item_key), std::string("expected one of: ") + allowed + ", got " +
                                                                    type_name(item));
    const auto it = std::find_if(choices.begin(), choices.end(), [&](const char* c) { return item.Scalar() == c; });
    if (it == choices.end())
      return yaml_error(display_name_, mark, path_of(item_key),
                        "unknown value " + shown_text(item.Scalar()) + "; expected one of: " + allowed);
    const size_t index = static_cast<size_t>(it - choices.begin());
    if (std::find(values.begin(), values.end(), index) != values.end())
      return yaml_error(display_name_, mark, path_of(item_key), shown_text(item.Scalar()) + " is listed twice");
    values.push_back(index);
  }
  *out = std::move(values);
  return Status::Ok();
}

Status ConfigMap::get_map(const std::string& key, bool required, ConfigMap* out) {
  remember(key);
  const YAML::Node* v = find(key);
  if (v == nullptr || v->IsNull()) {
    if (v == nullptr && required) return error(key, "required section is missing (expected a mapping)");
    *out = ConfigMap(YAML::Node(YAML::NodeType::Map), display_name_, path_of(key));
    out->mark_ = mark_;
    if (v != nullptr) {
      for (const auto& e : entries_) {
        if (e.key == key) out->mark_ = e.key_node.Mark();
      }
    }
    return Status::Ok();
  }
  if (!v->IsMap()) return error(key, std::string("expected a mapping, got ") + type_name(*v));
  *out = ConfigMap(*v, display_name_, path_of(key));
  return Status::Ok();
}

Status ConfigMap::finish() const {
  for (const auto& e : entries_) {
    if (std::find(asked_.begin(), asked_.end(), e.key) != asked_.end()) continue;
    std::string allowed;
    for (const auto& a : asked_) allowed += (allowed.empty() ? "" : ", ") + a;
    return yaml_error(display_name_, e.key_node.Mark(), path_of(e.key),
                      "unknown key (allowed here: " + allowed + ")");
  }
  return Status::Ok();
}

std::string format_double_exact(double v) {
  std::string text;
  for (int precision = 1; precision <= 17; ++precision) {
    std::ostringstream out;
    out.imbue(std::locale::classic());
    out.precision(precision);
    out << v;
    text = out.str();
    std::istringstream in(text);
    in.imbue(std::locale::classic());
    double back = 0;
    in >> back;
    if (back == v) break;
  }
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

}  // namespace edgevit
