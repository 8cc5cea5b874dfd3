#include "base/yaml_guard.h"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <locale>
#include <sstream>
#include <system_error>

#include "base/file_io.h"

namespace edgevit {
namespace {

std::string position(const std::string& display_name, int line, int col) {
  return display_name + ":" + std::to_string(line) + ":" + std::to_string(col);
}

Status text_error(const std::string& display_name, int line, int col, const std::string& reason) {
  return config_error(position(display_name, line, col) + ": " + reason);
}

// Pass 1: bytes. UTF-8 well-formedness (no overlongs, surrogates or > U+10FFFF), no NUL, no C0 control
// other than tab/LF/CR, no DEL.
Status check_bytes(const std::string& text, const std::string& display_name) {
  int line = 1;
  int col = 1;
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
      // CRLF line ends are fine; a lone CR is a line break in YAML but part of the scalar for yaml-cpp 0.7
      // (`path: x.safetensors\r` loaded with the CR in the file name; found by fuzz_model_config as a
      // failed save/parse round trip).
      if (c == '\r' && (i + 1 >= n || s[i + 1] != '\n'))
        return text_error(display_name, line, col, "carriage return not followed by a line feed (use LF or CRLF line ends)");
      if (c == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
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
    if (cp < min_cp || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return text_error(display_name, line, col, "invalid UTF-8 sequence");
    }
    i += len;
    ++col;
  }
  return Status::Ok();
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// yaml-cpp 0.7 starts a comment at a '#' wherever a token may start, with or without the space YAML asks
// for: after a block scalar header (`>#`, `|-#`, Scanner::ScanBlockScalar) and after `[`, `{`, `,`, `]`,
// `}` or a closing quote (Scanner::ScanToNextToken). The guard would read the rest of that line as text,
// yaml-cpp skips it: `>#a: [` is a block scalar to yaml-cpp and a flow collection to the guard, so a ','
// at the top of a later line looked to the guard like an entry of that collection while yaml-cpp looped on
// it (finding 16 in docs/reliability.md). Refused: the two readings must not differ.
Status glued_comment(const std::string& display_name, int line, int col, const std::string& after) {
  return text_error(display_name, line, col,
                    "'#' directly after '" + after +
                        "': a comment needs a space before it (yaml-cpp 0.7 would skip the rest of the line as one)");
}

// Pass 2: structure, one linear scan with a little state (quotes and flow brackets span lines; block
// scalars are skipped by indentation). It approximates the YAML grammar conservatively: it may count a
// level too many, never too few, and treats `&`/`*` at the start of a node as anchor/alias.
Status check_structure(const std::string& text, const std::string& display_name, const YamlLimits& limits) {
  const size_t n = text.size();
  std::vector<int> indents;  // block indentation stack; bounded by max_depth (checked below)
  indents.reserve(static_cast<size_t>(limits.max_depth) + 2);
  int flow_depth = 0;
  int flow_open_line = 0, flow_open_col = 0;  // where the outermost open flow collection started
  char flow_open = 0;
  std::string flow_stack;  // the open brackets, innermost last; bounded by max_depth (checked on push)
  flow_stack.reserve(static_cast<size_t>(limits.max_depth) + 1);
  char quote = 0;             // '"' or '\'' while inside a quoted scalar
  int block_scalar_indent = -1;  // inside a `|`/`>` scalar: the indentation of its header line
  int block_scalar_need = 0;     // ...and the indentation its text lines need, as yaml-cpp 0.7 counts it
  bool block_scalar_detect = false;  // ...still raised by leading blank lines (no text line yet, no digit)
  int line = 0;
  // A plain scalar that no ':' makes a key, as a document's first node or first on a line indented no
  // deeper than that node (where yaml-cpp is back at the top level): edgevit needs a mapping there, and
  // yaml-cpp 0.7 runs such a scalar on over the following lines (`V\n- | #\n ,` is one scalar "V - |"
  // and a top-level ',', which loops it; ` :\n7\n| #\n ,` too), where the guard would read a block scalar
  // header and skip the ','. Refused with the message parse_yaml_mapping gives a scalar (found by
  // fuzz_device_profile).
  bool root_seen = false;
  int root_col = 0;  // 0-based column of the document's first node
  int root_plain_line = 0, root_plain_col = 0;
  bool line_has_key = false;

  size_t i = 0;
  while (i < n) {
    ++line;
    const size_t line_start = i;
    size_t line_end = text.find('\n', i);
    if (line_end == std::string::npos) line_end = n;
    i = line_end + 1;

    size_t p = line_start;
    auto here = [&](size_t pos) { return static_cast<int>(pos - line_start) + 1; };

    // Indentation (only meaningful in block context, outside quoted scalars).
    size_t first = p;
    while (first < line_end && (text[first] == ' ' || text[first] == '\t')) ++first;
    const bool blank = first >= line_end || text[first] == '#' || (text[first] == '\r' && first + 1 >= line_end);
    const int indent = static_cast<int>(first - line_start);

    if (block_scalar_indent >= 0) {
      // yaml-cpp 0.7 (ScanScalar) takes the text's indentation from the first text line, raised by any
      // longer run of spaces on blank lines before it (or from the header's digit), and ends the scalar
      // at the first non-blank line indented less, a comment line included; the lines after it are
      // tokens again. Lines merely deeper than the header are not enough: `|\n  x\n ,`, `|\n  \n ,` and
      // `>\n#\n  ,` loop yaml-cpp like a leading ',' (found by fuzz_model_config and fuzz_device_profile).
      const bool empty = first >= line_end || (text[first] == '\r' && first + 1 >= line_end);
      size_t spaces_end = line_start;
      while (spaces_end < line_end && text[spaces_end] == ' ') ++spaces_end;
      const int spaces = static_cast<int>(spaces_end - line_start);
      if (empty) {
        if (block_scalar_detect) block_scalar_need = std::max(block_scalar_need, spaces);
        continue;
      }
      if (spaces >= block_scalar_need) {
        if (block_scalar_detect) block_scalar_need = spaces;
        block_scalar_detect = false;
        continue;
      }
      block_scalar_indent = -1;
    }

    bool node_start = true;   // the next token starts a node (anchor, alias, tag, quote, flow, block scalar)
    line_has_key = false;
    bool line_first = quote == 0 && flow_depth == 0;  // no token of this line seen yet
    int dash_levels = 0;
    if (quote == 0 && flow_depth == 0) {
      if (blank) continue;
      const size_t tab = text.find('\t', line_start);
      if (tab != std::string::npos && tab < first) {
        return text_error(display_name, line, here(tab), "tab character in indentation (YAML indents with spaces)");
      }
      if (text[first] == '%') continue;  // directive line
      if (text.compare(first, 3, "---") == 0 && indent == 0 &&
          (first + 3 >= line_end || is_space(text[first + 3]))) {
        indents.clear();
        root_seen = false;
        p = first + 3;
      } else if (text.compare(first, 3, "...") == 0 && indent == 0 &&
                 (first + 3 >= line_end || is_space(text[first + 3]))) {
        indents.clear();
        root_seen = false;
        p = first + 3;  // yaml-cpp scans on after a document end marker: `... ,x` loops it too (fuzzers)
      } else {
        while (!indents.empty() && indents.back() >= indent) indents.pop_back();
        indents.push_back(indent);
        p = first;
      }
    }

    auto depth = [&]() { return static_cast<int>(indents.size()) + dash_levels + flow_depth; };
    auto too_deep = [&](size_t pos) {
      return text_error(display_name, line, here(pos),
                        "nesting deeper than " + std::to_string(limits.max_depth) + " levels");
    };
    if (depth() > limits.max_depth) return too_deep(p);

    char prev = ' ';  // previous character on this line (space at line start)
    while (p < line_end) {
      const char c = text[p];
      if (quote == '"') {
        if (c == '\\') {
          // yaml-cpp 0.7 decodes the escapes \_ (U+00A0) and \N (U+0085) to one raw byte, not UTF-8: the
          // string it returns is invalid UTF-8 (found by fuzz_model_config as a failed save/parse round trip).
          const char e = p + 1 < line_end ? text[p + 1] : '\0';
          if (e == '_' || e == 'N')
            return text_error(display_name, line, here(p),
                              std::string("escape '\\") + e +
                                  "' is not supported (yaml-cpp decodes it to invalid UTF-8; write the character itself)");
          p += 2;
          continue;
        }
        if (c == '"') {
          quote = 0;
          node_start = true;  // see below
        }
        prev = c;
        ++p;
        continue;
      }
      if (quote == '\'') {
        if (c == '\'') {
          if (p + 1 < line_end && text[p + 1] == '\'') {
            p += 2;
            continue;
          }
          quote = 0;
          // yaml-cpp's scanner starts a new token after a quoted scalar or a flow collection, whatever
          // the grammar says: `'a' ,x`, `[a],x` or `"" "",x` loop like a leading ',' and `"a" "b"` is
          // two scalars (found by fuzz_model_config and fuzz_device_profile). So does the guard.
          node_start = true;
        }
        prev = c;
        ++p;
        continue;
      }
      if (is_space(c)) {
        prev = c;
        ++p;
        continue;
      }
      if (c == '#') {
        if (is_space(prev)) break;  // comment to end of line
        if (node_start) return glued_comment(display_name, line, here(p), std::string(1, prev));
      }
      const bool next_is_space = p + 1 >= line_end || is_space(text[p + 1]);
      if ((!root_seen || (line_first && indent <= root_col)) && node_start && quote == 0 && flow_depth == 0 &&
          c != '!' && c != '&') {
        if (!root_seen) root_col = here(p) - 1;
        root_seen = true;
        const bool indicator = std::strchr(",[]{}#&*!|>'\"%@`", c) != nullptr ||
                               ((c == '-' || c == '?' || c == ':') && next_is_space);
        if (!indicator) {
          root_plain_line = line;
          root_plain_col = here(p);
        }
      }
      if (c != '!' && c != '&') line_first = false;

      if (node_start) {
        if (c == ',' && flow_depth == 0) {
          // No plain scalar starts with ','; yaml-cpp 0.7 loops forever on a document that does (found by
          // fuzz_model_config and fuzz_device_profile).
          return text_error(display_name, line, here(p), "',' outside a flow collection ([...] or {...})");
        }
        if (c == '?' && next_is_space) {
          // Explicit ("complex") mapping keys: no edgevit config needs one, and yaml-cpp 0.7's LoadAll
          // never returns on `!x: a` followed by `? b` (found by fuzz_device_profile).
          return text_error(display_name, line, here(p), "explicit mapping key ('? ') is not supported in edgevit configs");
        }
        if (c == '-' && next_is_space && flow_depth == 0) {
          ++dash_levels;  // block sequence entry / explicit key: one more level on this line
          if (depth() > limits.max_depth) return too_deep(p);
          prev = c;
          ++p;
          continue;
        }
        if (c == '&' || c == '*') {
          if (!limits.allow_aliases) {
            return text_error(display_name, line, here(p),
                              std::string(c == '&' ? "anchor" : "alias") +
                                  " not allowed in edgevit configs (quote text that starts with '" + c + "')");
          }
        }
        if (c == '&' || c == '!') {  // anchor or tag: skip the token, the node still starts after it
          // A verbatim tag `!<...>` may hold any URI character. Otherwise the token ends where yaml-cpp 0.7
          // ends it and the node starts right there, space or not: an anchor name at a blank or one of
          // `,[]{}`, a shorthand tag (`!!str`, `!local`) at the first character outside its tag set
          // (Exp::Tag: letters, digits, `-#;/?:@&=+$_.~*'()`, `%` and two hex digits; `!` between handle
          // and suffix). So a ',' right after one meets the leading-',' check above: yaml-cpp loops
          // forever on `!t,x` just as on `,x`, and on `!" ",x` (a tag `!`, then a quoted scalar; the
          // guard took the quote for part of the tag; both found by fuzz_model_config).
          const size_t close = c == '!' && p + 1 < line_end && text[p + 1] == '<' ? text.find('>', p) : std::string::npos;
          if (close != std::string::npos && close < line_end) {
            p = close + 1;
          } else if (c == '&') {
            while (p < line_end && !is_space(text[p]) && std::strchr(",[]{}", text[p]) == nullptr) ++p;
          } else {
            auto alnum = [](char ch) {
              return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
            };
            auto hex = [&](size_t k) { return k < line_end && alnum(text[k]) && (text[k] <= '9' || (text[k] | 0x20) <= 'f'); };
            ++p;
            while (p < line_end) {
              const char t = text[p];
              if (alnum(t) || (t != '\0' && std::strchr("-#;/?:@&=+$_.~*'()!", t) != nullptr)) {
                ++p;
              } else if (t == '%' && hex(p + 1) && hex(p + 2)) {
                p += 3;
              } else {
                break;
              }
            }
          }
          prev = ' ';
          continue;
        }
        if (c == '"' || c == '\'') {
          quote = c;
          node_start = false;
          prev = c;
          ++p;
          continue;
        }
        if ((c == '|' || c == '>') && flow_depth == 0) {
          // The header as yaml-cpp 0.7 scans it: the indicator, a chomping indicator and/or an indentation
          // digit (either order), blanks, then a comment or the line end. Anything else is its "unexpected
          // character in block scalar", so the guard reads on as usual.
          auto chomping = [&](size_t k) { return k < line_end && (text[k] == '+' || text[k] == '-'); };
          auto digit = [&](size_t k) { return k < line_end && text[k] >= '0' && text[k] <= '9'; };
          size_t q = p + 1;
          if (chomping(q)) {
            ++q;
            if (digit(q)) ++q;
          } else if (digit(q)) {
            ++q;
            if (chomping(q)) ++q;
          }
          if (q < line_end && text[q] == '#') return glued_comment(display_name, line, here(q), text.substr(p, q - p));
          int digit_value = 0;
          for (size_t k = p + 1; k < q; ++k) {
            if (digit(k)) digit_value = text[k] - '0';
          }
          while (q < line_end && is_space(text[q])) ++q;
          if (q >= line_end || text[q] == '#') {
            block_scalar_indent = indent;
            // yaml-cpp needs the digit (or 1) plus the enclosing block collection's indentation, none at
            // the top level. Only there can a ',' loop it (inside a collection it is a syntax error), and
            // there this line's indentation is at least that, so the guard ends no scalar too late.
            block_scalar_need = indent + std::max(digit_value, 1);
            block_scalar_detect = digit_value == 0;
            break;
          }
        }
      }
      if (c == '[' || c == '{') {
        if (node_start || flow_depth > 0) {
          if (flow_depth == 0) {
            flow_open_line = line;
            flow_open_col = here(p);
            flow_open = c;
          }
          ++flow_depth;
          if (depth() > limits.max_depth) return too_deep(p);
          flow_stack.push_back(c);
          node_start = true;
          prev = c;
          ++p;
          continue;
        }
      } else if ((c == ']' || c == '}') && flow_depth > 0) {
        // A closer that does not match its opener (`[a}`) loops yaml-cpp 0.7 (found by fuzz_device_profile).
        const char want = flow_stack.back() == '[' ? ']' : '}';
        if (c != want)
          return text_error(display_name, line, here(p),
                            std::string("YAML syntax error: '") + c + "' closes a '" + flow_stack.back() +
                                "' (expected '" + want + "')");
        flow_stack.pop_back();
        --flow_depth;
        node_start = true;  // a new token follows (see the quoted scalars above)
        prev = c;
        ++p;
        continue;
      } else if (c == ',' && flow_depth > 0) {
        node_start = true;
        prev = c;
        ++p;
        continue;
      } else if (c == ':' && (next_is_space || flow_depth > 0)) {
        if (flow_depth == 0) line_has_key = true;
        node_start = true;
        prev = c;
        ++p;
        continue;
      }
      node_start = false;
      prev = c;
      ++p;
    }
    if (root_plain_line == line && !line_has_key)
      return text_error(display_name, root_plain_line, root_plain_col,
                        "top level must be a mapping of keys, got a scalar (yaml-cpp 0.7 runs a plain scalar there on "
                        "over the next lines)");
  }
  if (quote != 0) return text_error(display_name, line, 1, "unterminated quoted string");
  // A flow collection still open at the end is a syntax error yaml-cpp reports, except that some such
  // documents (`[[>>>...` with a block-scalar indicator inside, found by fuzz_device_profile) make yaml-cpp
  // 0.7 loop forever instead: refuse them all here, before it parses.
  if (flow_depth > 0)
    return text_error(display_name, flow_open_line, flow_open_col,
                      std::string("YAML syntax error: '") + flow_open + "' is never closed (missing '" +
                          (flow_open == '[' ? ']' : '}') + "')");
  return Status::Ok();
}

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

Status check_yaml_text(const std::string& text, const std::string& display_name, const YamlLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return config_error(display_name + ": file is " + std::to_string(text.size()) + " bytes, more than the " +
                        std::to_string(limits.max_bytes) + "-byte limit for configs");
  }
  EV_RETURN_IF_ERROR(check_bytes(text, display_name));
  return check_structure(text, display_name, limits);
}

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

}  // namespace

Result<YAML::Node> parse_yaml_mapping(const std::string& text, const std::string& display_name,
                                      const YamlLimits& limits) {
  EV_RETURN_IF_ERROR(check_yaml_text(text, display_name, limits));
  // Never YAML::LoadAll: on a token its document parser does not consume (a stray ',' at the top level, in
  // every form findings 4, 6, 11, 13, 14 and 16 of docs/reliability.md took), yaml-cpp 0.7 returns an empty
  // document and LoadAll asks for the next one forever. Documents are counted through the parser directly,
  // at most max_documents + 1 of them, so any such input ends as "more than N documents" whether or not the
  // guard above recognised it; YAML::Load then builds the first document only.
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

  // Duplicate keys (yaml-cpp keeps both and lookups see the first): walk every mapping iteratively.
  // The tree is acyclic and its size bounded by the text because aliases were checked above.
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
