// check_yaml_text: the limits every config text must meet before yaml-cpp builds a tree from it.
//
//   Bytes: UTF-8 well-formedness, no NUL or control bytes, no lone CR, no Unicode line separators;
//   Events: libyaml's event parser (non-recursive, fuzzed upstream), one event at a time: syntax, nesting
//     depth, node count with aliases expanded, scalar length, anchors/aliases, documents, the top level;
//   Explicit keys: libyaml's scanner once more, for explicit keys ('? '), which events do not show.
// The three run in that order. Each stops at the first violation, so hostile text costs at most one linear
// scan per check: a 100000-deep `[[[[` stops at the 65th bracket. libyaml's marks count characters (not
// bytes) after an optional byte order mark; CharCursor maps them back to bytes where the text itself must be
// looked at.
#include <yaml.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/yaml_guard.h"

namespace edgevit {
namespace {

Status text_error(const std::string& display_name, size_t line, size_t col, const std::string& reason) {
  return config_error(display_name + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + reason);
}

// The character at UTF-8 sequence `lead` is a Unicode line break libyaml honours and yaml-cpp 0.7 does not.
const char* unicode_line_break(const unsigned char* s, size_t n, size_t i) {
  if (i + 1 < n && s[i] == 0xc2 && s[i + 1] == 0x85) return "U+0085 (next line)";
  if (i + 2 < n && s[i] == 0xe2 && s[i + 1] == 0x80 && (s[i + 2] == 0xa8 || s[i + 2] == 0xa9))
    return s[i + 2] == 0xa8 ? "U+2028 (line separator)" : "U+2029 (paragraph separator)";
  return nullptr;
}

// Bytes: UTF-8 well-formedness (no overlongs, surrogates or > U+10FFFF), no NUL, no C0 control
// other than tab/LF/CR, no DEL. CRLF line ends are fine; a lone CR is a line break to libyaml but part of
// the scalar to yaml-cpp 0.7 (`path: x.safetensors\r` loaded with the CR in the file name; found by
// fuzz_model_config), and NEL/LS/PS likewise break lines for libyaml only, so the two would read such text
// differently: refused.
Status check_bytes(const std::string& text, const std::string& display_name) {
  size_t line = 1;
  size_t col = 1;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      if (c == 0) return text_error(display_name, line, col, "NUL byte in text");
      if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "0x%02x", c);
        return text_error(display_name, line, col, std::string("control character ") + hex + " in text");
      }
      if (c == '\r' && (i + 1 >= n || s[i + 1] != '\n'))
        return text_error(display_name, line, col,
                          "carriage return not followed by a line feed (use LF or CRLF line ends)");
      line = c == '\n' ? line + 1 : line;
      col = c == '\n' ? 1 : col + 1;
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    uint32_t min_cp = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f, min_cp = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f, min_cp = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07, min_cp = 0x10000;
    } else {
      return text_error(display_name, line, col, "invalid UTF-8 byte");
    }
    if (i + len > n) return text_error(display_name, line, col, "truncated UTF-8 sequence");
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) return text_error(display_name, line, col, "invalid UTF-8 sequence");
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if (cp < min_cp || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return text_error(display_name, line, col, "invalid UTF-8 sequence");
    if (const char* name = unicode_line_break(s, n, i))
      return text_error(display_name, line, col,
                        std::string(name) + " in text (libyaml breaks the line there, yaml-cpp does not)");
    i += len;
    ++col;
  }
  return Status::Ok();
}

// Maps libyaml's character index to a byte offset in well-formed UTF-8 text. Moving forward is amortised
// linear over a whole pass; a lookup behind the cursor starts again from the beginning.
class CharCursor {
 public:
  explicit CharCursor(const std::string& text) : text_(text) {
    if (text.compare(0, 3, "\xef\xbb\xbf") == 0) start_ = byte_ = 3;  // libyaml drops the BOM
  }
  size_t byte_of(size_t index) {
    if (index < index_) byte_ = start_, index_ = 0;
    while (index_ < index && byte_ < text_.size()) {
      ++byte_;
      while (byte_ < text_.size() && (static_cast<unsigned char>(text_[byte_]) & 0xc0) == 0x80) ++byte_;
      ++index_;
    }
    return byte_;
  }
  char at(size_t index) {
    const size_t b = byte_of(index);
    return b < text_.size() ? text_[b] : '\0';
  }

 private:
  const std::string& text_;
  size_t start_ = 0;
  size_t byte_ = 0;
  size_t index_ = 0;
};

// Owns a libyaml parser reading `text` (which must outlive it).
class LibyamlParser {
 public:
  explicit LibyamlParser(const std::string& text) {
    ok_ = yaml_parser_initialize(&parser_) != 0;
    if (ok_)
      yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  }
  ~LibyamlParser() {
    if (ok_) yaml_parser_delete(&parser_);
  }
  LibyamlParser(const LibyamlParser&) = delete;
  LibyamlParser& operator=(const LibyamlParser&) = delete;
  bool ok() const { return ok_; }
  yaml_parser_t* get() { return &parser_; }

 private:
  yaml_parser_t parser_{};
  bool ok_ = false;
};

// Owns one event or token until the next one is read.
struct EventHolder {
  yaml_event_t event{};
  bool filled = false;
  ~EventHolder() { reset(); }
  void reset() {
    if (filled) yaml_event_delete(&event);
    filled = false;
  }
};
struct TokenHolder {
  yaml_token_t token{};
  bool filled = false;
  ~TokenHolder() { reset(); }
  void reset() {
    if (filled) yaml_token_delete(&token);
    filled = false;
  }
};

bool problem_is_end_of_stream(const yaml_parser_t& parser) {
  return parser.problem != nullptr && std::strstr(parser.problem, "end of stream") != nullptr;
}

// Events: libyaml's events, each checked against the limits as it arrives. Nothing is kept per node
// except the open collections (at most max_depth) and, when aliases are allowed, each anchor's size.
class EventPass {
 public:
  EventPass(const std::string& text, const std::string& display_name, const YamlLimits& limits)
      : text_(text), display_name_(display_name), limits_(limits), cursor_(text) {}

  Status run();

 private:
  struct Open {
    size_t first_node;   // nodes_ when it opened
    std::string anchor;  // "" when none
    char bracket;        // '[' or '{' for a flow collection, 0 for a block one
    yaml_mark_t mark;
  };

  Status on_event(const yaml_event_t& e);
  Status on_root(const yaml_event_t& e);
  Status on_node(const yaml_event_t& e, const yaml_char_t* anchor);
  Status on_collection_start(const yaml_event_t& e, const yaml_char_t* anchor, bool flow, char bracket);
  Status on_collection_end();
  Status on_scalar(const yaml_event_t& e);
  Status on_alias(const yaml_event_t& e);
  Status add_nodes(size_t count, const yaml_mark_t& mark);
  Status check_escapes(const yaml_event_t& e);
  Status syntax_error(const yaml_parser_t& parser);
  std::string syntax_hint(const yaml_parser_t& parser);
  Status error_at(const yaml_mark_t& mark, const std::string& reason) const {
    return text_error(display_name_, mark.line + 1, mark.column + 1, reason);
  }

  const std::string& text_;
  const std::string& display_name_;
  const YamlLimits& limits_;
  CharCursor cursor_;
  std::vector<Open> open_;                          // innermost last; bounded by max_depth
  std::unordered_map<std::string, size_t> anchors_;  // name -> nodes it stands for (aliases allowed only)
  size_t nodes_ = 0;                                // aliases expanded
  int aliases_ = 0;
  int documents_ = 0;
  bool want_root_ = false;  // the next node is a document's top level
  Status scalar_root_;      // the refusal of a top-level scalar, reported after the document
};

Status EventPass::run() {
  LibyamlParser parser(text_);
  if (!parser.ok()) return config_error(display_name_ + ": libyaml could not start a parser (out of memory)");
  EventHolder holder;
  for (;;) {
    holder.reset();
    if (!yaml_parser_parse(parser.get(), &holder.event)) return syntax_error(*parser.get());
    holder.filled = true;
    if (holder.event.type == YAML_STREAM_END_EVENT) return scalar_root_;
    EV_RETURN_IF_ERROR(on_event(holder.event));
  }
}

Status EventPass::on_event(const yaml_event_t& e) {
  switch (e.type) {
    case YAML_DOCUMENT_START_EVENT:
      EV_RETURN_IF_ERROR(scalar_root_);
      if (++documents_ > limits_.max_documents)
        return error_at(e.start_mark, "more than " + std::to_string(limits_.max_documents) +
                                          " YAML document(s) in one file (a '---' starts another)");
      want_root_ = true;
      return Status::Ok();
    case YAML_SCALAR_EVENT:
      EV_RETURN_IF_ERROR(on_root(e));
      EV_RETURN_IF_ERROR(on_node(e, e.data.scalar.anchor));
      return on_scalar(e);
    case YAML_SEQUENCE_START_EVENT:
      EV_RETURN_IF_ERROR(on_root(e));
      return on_collection_start(e, e.data.sequence_start.anchor,
                                 e.data.sequence_start.style == YAML_FLOW_SEQUENCE_STYLE, '[');
    case YAML_MAPPING_START_EVENT:
      EV_RETURN_IF_ERROR(on_root(e));
      return on_collection_start(e, e.data.mapping_start.anchor,
                                 e.data.mapping_start.style == YAML_FLOW_MAPPING_STYLE, '{');
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
      return on_collection_end();
    case YAML_ALIAS_EVENT:
      EV_RETURN_IF_ERROR(on_root(e));
      return on_alias(e);
    default:
      return Status::Ok();
  }
}

// edgevit needs a mapping at the top level. A top-level scalar is refused, before yaml-cpp reads it in its
// own way (yaml-cpp 0.7 runs a top-level plain scalar on over the following lines, where libyaml reads more
// structure; found by fuzz_device_profile), but only where the next document starts or the text ends: a
// syntax error libyaml finds after it says more about the text. An empty document (a null root) and a
// top-level list pass on to the limits and then to the caller, which names them as such.
Status EventPass::on_root(const yaml_event_t& e) {
  if (!want_root_) return Status::Ok();
  want_root_ = false;
  if (e.type != YAML_SCALAR_EVENT) return Status::Ok();
  if (e.data.scalar.length == 0 && e.data.scalar.plain_implicit && e.data.scalar.tag == nullptr &&
      e.data.scalar.anchor == nullptr)
    return Status::Ok();
  scalar_root_ = error_at(e.start_mark, "top level must be a mapping of keys, got a scalar");
  return Status::Ok();
}

Status EventPass::on_node(const yaml_event_t& e, const yaml_char_t* anchor) {
  if (anchor != nullptr && !limits_.allow_aliases)
    return error_at(e.start_mark, "anchor not allowed in edgevit configs (quote text that starts with '&')");
  return add_nodes(1, e.start_mark);
}

Status EventPass::add_nodes(size_t count, const yaml_mark_t& mark) {
  if (count > limits_.max_nodes - nodes_) {
    return error_at(mark, "more than " + std::to_string(limits_.max_nodes) +
                              " YAML nodes (scalars, lists and mappings; an alias counts as what it stands for)");
  }
  nodes_ += count;
  return Status::Ok();
}

Status EventPass::on_collection_start(const yaml_event_t& e, const yaml_char_t* anchor, bool flow, char bracket) {
  if (static_cast<int>(open_.size()) >= limits_.max_depth)
    return error_at(e.start_mark, "nesting deeper than " + std::to_string(limits_.max_depth) + " levels");
  EV_RETURN_IF_ERROR(on_node(e, anchor));
  open_.push_back(Open{nodes_ - 1, anchor != nullptr ? reinterpret_cast<const char*>(anchor) : "",
                       flow ? bracket : '\0', e.start_mark});
  return Status::Ok();
}

Status EventPass::on_collection_end() {
  if (open_.empty()) return Status::Ok();  // libyaml pairs them; nothing to undo otherwise
  const Open& closed = open_.back();
  if (!closed.anchor.empty()) anchors_[closed.anchor] = nodes_ - closed.first_node;
  open_.pop_back();
  return Status::Ok();
}

Status EventPass::on_scalar(const yaml_event_t& e) {
  if (e.data.scalar.length > limits_.max_scalar_bytes) {
    return error_at(e.start_mark, "scalar of " + std::to_string(e.data.scalar.length) + " bytes is longer than the " +
                                      std::to_string(limits_.max_scalar_bytes) + "-byte limit for one value");
  }
  if (e.data.scalar.anchor != nullptr) anchors_[reinterpret_cast<const char*>(e.data.scalar.anchor)] = 1;
  if (e.data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE) return check_escapes(e);
  return Status::Ok();
}

// Alias expansion is bounded by max_nodes: each use adds the size of the node it names (already counted
// with its own aliases expanded), so a "billion laughs" stops within a few levels.
Status EventPass::on_alias(const yaml_event_t& e) {
  if (!limits_.allow_aliases)
    return error_at(e.start_mark, "alias not allowed in edgevit configs (quote text that starts with '*')");
  const std::string name = reinterpret_cast<const char*>(e.data.alias.anchor);
  if (++aliases_ > limits_.max_aliases)
    return error_at(e.start_mark, "more than " + std::to_string(limits_.max_aliases) + " aliases");
  for (const Open& o : open_) {
    if (o.anchor == name) return error_at(e.start_mark, "alias '*" + name + "' refers to a node that contains it");
  }
  const auto it = anchors_.find(name);
  if (it == anchors_.end()) return error_at(e.start_mark, "alias '*" + name + "' names no anchor defined before it");
  return add_nodes(it->second, e.start_mark);
}

// yaml-cpp 0.7 decodes the escapes \_ (U+00A0) and \N (U+0085) to one raw byte, not UTF-8: the string it
// returns is invalid UTF-8 (found by fuzz_model_config as a failed save/parse round trip). libyaml has
// decoded the escapes already, so the scalar's source text is read for them.
Status EventPass::check_escapes(const yaml_event_t& e) {
  const size_t begin = cursor_.byte_of(e.start_mark.index);
  const size_t end = cursor_.byte_of(e.end_mark.index);
  size_t line = e.start_mark.line + 1;
  size_t col = e.start_mark.column + 1;
  for (size_t b = begin; b < end; ++b) {
    const char c = text_[b];
    if (c == '\\' && b + 1 < end) {
      const char esc = text_[b + 1];
      if (esc == '_' || esc == 'N')
        return text_error(display_name_, line, col,
                          std::string("escape '\\") + esc +
                              "' is not supported (yaml-cpp decodes it to invalid UTF-8; write the character itself)");
      if (esc != '\n' && esc != '\r') ++b, ++col;  // the escaped character is not an escape itself
    }
    if (c == '\n') {
      ++line, col = 1;
    } else if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) {
      ++col;
    }
  }
  return Status::Ok();
}

// "<file>:<line>:<col>: [<what the offending character means>; ]YAML syntax error: <libyaml's problem>
// (<its context> at <line>:<col>)". libyaml names the token it expected; the hint names the character it
// found, for the mistakes yaml-cpp 0.7 would have looped on or misread.
Status EventPass::syntax_error(const yaml_parser_t& parser) {
  const std::string problem = parser.problem != nullptr ? parser.problem : "unknown error";
  if (parser.error == YAML_READER_ERROR || parser.error == YAML_MEMORY_ERROR) {
    return config_error(display_name_ + ": YAML syntax error: " + problem + " (byte " +
                        std::to_string(parser.problem_offset) + ")");
  }
  std::string reason = syntax_hint(parser) + "YAML syntax error: " + problem;
  if (parser.context != nullptr) {
    reason += " (" + std::string(parser.context) + " at " + std::to_string(parser.context_mark.line + 1) + ":" +
              std::to_string(parser.context_mark.column + 1) + ")";
  }
  return error_at(parser.problem_mark, reason);
}

std::string EventPass::syntax_hint(const yaml_parser_t& parser) {
  const yaml_mark_t& mark = parser.problem_mark;
  const std::string context = parser.context != nullptr ? parser.context : "";
  if (context.find("quoted scalar") != std::string::npos && problem_is_end_of_stream(parser))
    return "unterminated quoted string; ";
  const bool at_end = cursor_.byte_of(mark.index) >= text_.size();
  const char c = cursor_.at(mark.index);
  char flow = 0;  // the innermost open flow collection
  const Open* outermost_flow = nullptr;
  for (const Open& o : open_) {
    if (o.bracket != 0 && outermost_flow == nullptr) outermost_flow = &o;
    if (o.bracket != 0) flow = o.bracket;
  }
  if (c == ',' && flow == 0) return "',' outside a flow collection ([...] or {...}); ";
  if (c == '\t') return "tab character in indentation (YAML indents with spaces); ";
  if ((c == ']' && flow == '{') || (c == '}' && flow == '['))
    return std::string("'") + c + "' closes a '" + flow + "' (expected '" + (flow == '[' ? ']' : '}') + "'); ";
  if (at_end && outermost_flow != nullptr) {
    return std::string("'") + outermost_flow->bracket + "' opened at " + std::to_string(outermost_flow->mark.line + 1) +
           ":" + std::to_string(outermost_flow->mark.column + 1) + " is never closed; ";
  }
  if (std::strstr(parser.problem != nullptr ? parser.problem : "", "<document start>") != nullptr)
    return "text after the top-level node that YAML cannot place in the document; ";
  return "";
}

// Explicit keys: libyaml marks a KEY token at the '?' of an explicit key (and at the key itself for
// an implicit one). yaml-cpp 0.7 reads them otherwise (`!x: a\n? b` is one mapping to libyaml, two
// documents to yaml-cpp, whose LoadAll never returns on it; found by fuzz_device_profile), and no edgevit
// config needs one. Runs after the event pass, so the text is well-formed and within the depth limit.
Status check_explicit_keys(const std::string& text, const std::string& display_name) {
  LibyamlParser parser(text);
  if (!parser.ok()) return config_error(display_name + ": libyaml could not start a parser (out of memory)");
  CharCursor cursor(text);
  TokenHolder holder;
  for (;;) {
    holder.reset();
    if (!yaml_parser_scan(parser.get(), &holder.token)) return Status::Ok();  // reported by the event pass
    holder.filled = true;
    const yaml_token_t& t = holder.token;
    if (t.type == YAML_STREAM_END_TOKEN) return Status::Ok();
    if (t.type != YAML_KEY_TOKEN || cursor.at(t.start_mark.index) != '?') continue;
    const char next = cursor.at(t.start_mark.index + 1);
    if (next == ' ' || next == '\t' || next == '\r' || next == '\n' || next == '\0') {
      return text_error(display_name, t.start_mark.line + 1, t.start_mark.column + 1,
                        "explicit mapping key ('? ') is not supported in edgevit configs");
    }
  }
}

}  // namespace

Status check_yaml_text(const std::string& text, const std::string& display_name, const YamlLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return config_error(display_name + ": file is " + std::to_string(text.size()) + " bytes, more than the " +
                        std::to_string(limits.max_bytes) + "-byte limit for configs");
  }
  EV_RETURN_IF_ERROR(check_bytes(text, display_name));
  EV_RETURN_IF_ERROR(EventPass(text, display_name, limits).run());
  return check_explicit_keys(text, display_name);
}

}  // namespace edgevit
