#include "serving/client.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "runtime/safetensors.h"
#include "serving/edgevit_client.h"
#include "serving/json_text.h"

namespace edgevit::daemon {

using protocol::ErrorCode;

StatusCode status_for_daemon_error(uint32_t code) {
  switch (static_cast<ErrorCode>(code)) {
    case ErrorCode::kBadImage:
    case ErrorCode::kBadShape:
    case ErrorCode::kTooLarge: return StatusCode::kInputError;
    case ErrorCode::kBusy:
    case ErrorCode::kShuttingDown:
    case ErrorCode::kTimeout:
    case ErrorCode::kPermissionDenied: return StatusCode::kIoError;
    case ErrorCode::kNonFinite: return StatusCode::kNonFinite;
    case ErrorCode::kNoSuchOutput: return StatusCode::kUnsupported;
    default: break;
  }
  return code == client::kTransportError ? StatusCode::kIoError : StatusCode::kInternal;
}

namespace {

Status to_status(const client::Error& e, const std::string& what) {
  return Status(status_for_daemon_error(e.code), what + ": " + e.message);
}

Result<std::vector<uint8_t>> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open input " + path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return io_error("cannot read input " + path);
  return bytes;
}

// A value the client would print as a prediction must be finite: a daemon answer holding NaN or Inf is an
// error (exit 11, like the daemon's non_finite_output), never a line of output.
Status check_finite(const std::string& input, const client::InferAnswer& a) {
  for (const auto& image : a.topk)
    for (const auto& e : image)
      if (!std::isfinite(e.score))
        return non_finite(input + ": the daemon's answer holds a non-finite score for class " + std::to_string(e.index));
  for (size_t i = 0; i < a.logits.size(); ++i)
    if (!std::isfinite(a.logits[i]))
      return non_finite(input + ": the daemon's answer holds a non-finite logit at " + std::to_string(i));
  for (const client::OutputSection& s : a.outputs)
    for (size_t i = 0; i < s.values.size(); ++i)
      if (!std::isfinite(s.values[i]))
        return non_finite(input + ": the daemon's answer holds a non-finite " + s.name + " value at " +
                          std::to_string(i));
  return Status::Ok();
}

size_t per_image(const client::OutputSection& s) {
  size_t p = 1;
  for (uint32_t d : s.dims) p *= d;
  return p;
}

std::string dims_text(const client::OutputSection& s) {
  std::string t;
  for (uint32_t d : s.dims) t += (t.empty() ? "[" : ", ") + std::to_string(d);
  return t + "]";
}

// "L2 norm 12.3456, first values [0.1234, -0.5678, ...]" of one image's values.
std::string vector_summary(const float* v, size_t count) {
  double sum = 0;
  for (size_t i = 0; i < count; ++i) sum += static_cast<double>(v[i]) * v[i];
  char buf[64];
  std::snprintf(buf, sizeof buf, "L2 norm %.4f, first values [", std::sqrt(sum));
  std::string t = buf;
  const size_t shown = std::min<size_t>(count, 6);
  for (size_t i = 0; i < shown; ++i) {
    std::snprintf(buf, sizeof buf, "%s%.4f", i ? ", " : "", v[i]);
    t += buf;
  }
  return t + (count > shown ? ", ...]" : "]");
}

// The named output sections of image i, as text lines.
void print_sections(const client::InferAnswer& a, int i, std::ostream& out) {
  for (const client::OutputSection& s : a.outputs) {
    const size_t per = per_image(s);
    out << "  " << s.name << " " << dims_text(s) << ": "
        << vector_summary(s.values.data() + per * static_cast<size_t>(i), per) << "\n";
  }
}

Status print_answer(const std::string& input, const client::InferAnswer& a, const ClientOptions& o, std::ostream& out) {
  EV_RETURN_IF_ERROR(check_finite(input, a));
  if (o.json) {
    // Labels and the input name are bytes from elsewhere: valid UTF-8 before they become JSON strings.
    auto list = [](const std::vector<client::TopEntry>& v) {
      nlohmann::ordered_json l = nlohmann::ordered_json::array();
      for (const auto& e : v) l.push_back({{"index", e.index}, {"label", valid_utf8(e.label)}, {"score", e.score}});
      return l;
    };
    nlohmann::ordered_json j;
    j["input"] = valid_utf8(input);
    j["topk"] = a.topk.empty() ? nlohmann::ordered_json::array() : list(a.topk[0]);
    if (a.n > 1) {
      nlohmann::ordered_json imgs = nlohmann::ordered_json::array();
      for (const auto& t : a.topk) imgs.push_back(list(t));
      j["images"] = imgs;
    }
    if (a.logits_per_image > 0) j["logits"] = a.logits;
    for (const client::OutputSection& s : a.outputs) {  // name: {"dims": per image, "values": (n, dims...) flat}
      double sum = 0;
      for (size_t v = 0; v < per_image(s); ++v) sum += static_cast<double>(s.values[v]) * s.values[v];
      j[s.name] = {{"dims", s.dims}, {"l2_norm_image0", std::sqrt(sum)}, {"values", s.values}};
    }
    j["latency_us"] = a.latency_ns / 1e3;
    j["infer_us"] = a.infer_ns / 1e3;
    j["batch_images"] = a.batch_images;
    j["batch_row"] = a.batch_row;
    out << dump_json(j) << "\n";
    return Status::Ok();
  }
  for (int i = 0; i < a.n; ++i) {
    out << input;
    if (a.n > 1) out << " [image " << i << "]";
    out << ":\n";
    int rank = 1;
    for (const auto& e : a.topk[i]) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "  %d. %-20s p=%.4f  [%d]\n", rank++, e.label.empty() ? ("class " + std::to_string(e.index)).c_str() : e.label.c_str(),
                    e.score, e.index);
      out << buf;
    }
    if (a.logits_per_image > 0) {
      out << "  logits:";
      for (int c = 0; c < a.logits_per_image; ++c) out << " " << a.logits[static_cast<size_t>(i) * a.logits_per_image + c];
      out << "\n";
    }
    print_sections(a, i, out);
  }
  char buf[128];
  std::snprintf(buf, sizeof buf, "  latency %.1f us in the daemon (inference %.1f us, batch of %d)\n", a.latency_ns / 1e3,
                a.infer_ns / 1e3, a.batch_images);
  out << buf;
  return Status::Ok();
}

}  // namespace

Status run_client(const ClientOptions& o, std::ostream& out) {
  if (o.inputs.empty() && o.query.empty()) return invalid_argument("client needs --input FILE (or --query health|stats|version)");
  client::Connection c;
  client::Error err;
  if (!c.connect(o.socket_path, &err, o.timeout_ms)) return to_status(err, "edgevitd at " + o.socket_path);
  if (!o.query.empty()) {
    protocol::Op op;
    if (o.query == "health") op = protocol::Op::kHealth;
    else if (o.query == "stats") op = protocol::Op::kStats;
    else if (o.query == "version") op = protocol::Op::kVersion;
    else return invalid_argument("--query must be health, stats or version, got '" + o.query + "'");
    std::string json;
    if (!c.query(op, &json, &err)) return to_status(err, o.query);
    const auto parsed = nlohmann::ordered_json::parse(json, nullptr, false);
    if (parsed.is_discarded()) return internal_error(o.query + ": the daemon's answer is not JSON");
    out << dump_json(parsed, o.json ? -1 : 2) << "\n";
  }
  const uint32_t want = (o.logits ? protocol::kFlagWantLogits : 0u) |
                        (o.embedding ? protocol::kFlagWantEmbedding : 0u) | (o.tokens ? protocol::kFlagWantTokens : 0u);
  for (const std::string& input : o.inputs) {
    client::InferAnswer a;
    // A safetensors file with tensor `input` goes as a tensor; anything else as an encoded image.
    auto st = SafetensorsFile::open(input);
    const TensorInfo* t = st.ok() ? st->find("input") : nullptr;
    if (t != nullptr) {
      if (t->shape.size() != 3 && t->shape.size() != 4)
        return input_error(input + ": tensor 'input' must be [C,H,W] or [N,C,H,W]");
      std::vector<float> data(static_cast<size_t>(t->numel));
      convert_to_f32(*t, st->data(*t), data.data());
      uint32_t dims[4] = {0, 0, 0, 0};
      for (size_t i = 0; i < t->shape.size(); ++i) dims[i] = static_cast<uint32_t>(t->shape[i]);
      const int ndim = static_cast<int>(t->shape.size());
      // More images than the daemon's batch: send them in chunks of its batch (health reports it).
      uint32_t chunk = ndim == 4 ? dims[0] : 1;
      if (ndim == 4 && dims[0] > 1) {
        std::string health;
        if (!c.query(protocol::Op::kHealth, &health, &err)) return to_status(err, "health");
        const auto h = nlohmann::json::parse(health, nullptr, false);
        if (h.is_object() && h.value("batch", 0) > 0) chunk = std::min<uint32_t>(dims[0], h.value("batch", 0));
      }
      const size_t per = ndim == 4 ? static_cast<size_t>(dims[1]) * dims[2] * dims[3] : 0;
      for (uint32_t start = 0; start < (ndim == 4 ? dims[0] : 1); start += chunk) {
        uint32_t d[4] = {dims[0], dims[1], dims[2], dims[3]};
        if (ndim == 4) d[0] = std::min(chunk, dims[0] - start);
        client::InferAnswer part;
        if (!c.infer_tensor(data.data() + start * per, d, ndim, o.topk, want, &part, &err))
          return to_status(err, input);
        if (start == 0) {
          a = std::move(part);
        } else {
          a.n += part.n;
          a.topk.insert(a.topk.end(), part.topk.begin(), part.topk.end());
          a.logits.insert(a.logits.end(), part.logits.begin(), part.logits.end());
          for (size_t s = 0; s < a.outputs.size() && s < part.outputs.size(); ++s)
            a.outputs[s].values.insert(a.outputs[s].values.end(), part.outputs[s].values.begin(),
                                       part.outputs[s].values.end());
          a.latency_ns += part.latency_ns;
          a.infer_ns += part.infer_ns;
        }
      }
    } else {
      EV_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(input));
      if (!c.infer_image(bytes.data(), bytes.size(), o.topk, want, &a, &err)) return to_status(err, input);
    }
    EV_RETURN_IF_ERROR(print_answer(input, a, o, out));
  }
  return Status::Ok();
}

}  // namespace edgevit::daemon
