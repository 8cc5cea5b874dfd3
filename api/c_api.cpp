// The C API (api/edgevit.h) over open_engine and Engine. Every entry point catches every exception (C++
// must not unwind into C) and turns it into EDGEVIT_INTERNAL with the exception's message.
#include "api/edgevit.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "api/edgevit.hpp"

static_assert(EDGEVIT_OK == static_cast<int>(edgevit::StatusCode::kOk), "C codes mirror StatusCode");
static_assert(EDGEVIT_INVALID_ARGUMENT == static_cast<int>(edgevit::StatusCode::kInvalidArgument), "");
static_assert(EDGEVIT_NOT_FOUND == static_cast<int>(edgevit::StatusCode::kNotFound), "");
static_assert(EDGEVIT_IO_ERROR == static_cast<int>(edgevit::StatusCode::kIoError), "");
static_assert(EDGEVIT_CONFIG_ERROR == static_cast<int>(edgevit::StatusCode::kConfigError), "");
static_assert(EDGEVIT_CHECKPOINT_ERROR == static_cast<int>(edgevit::StatusCode::kCheckpointError), "");
static_assert(EDGEVIT_INPUT_ERROR == static_cast<int>(edgevit::StatusCode::kInputError), "");
static_assert(EDGEVIT_UNSUPPORTED == static_cast<int>(edgevit::StatusCode::kUnsupported), "");
static_assert(EDGEVIT_DOES_NOT_FIT == static_cast<int>(edgevit::StatusCode::kDoesNotFit), "");
static_assert(EDGEVIT_DEVICE_ERROR == static_cast<int>(edgevit::StatusCode::kDeviceError), "");
static_assert(EDGEVIT_CHECK_FAILED == static_cast<int>(edgevit::StatusCode::kCheckFailed), "");
static_assert(EDGEVIT_NON_FINITE == static_cast<int>(edgevit::StatusCode::kNonFinite), "");
static_assert(EDGEVIT_INTERNAL == static_cast<int>(edgevit::StatusCode::kInternal), "");

// The handle: the engine and how many images its outputs hold (0 before the first successful infer).
struct edgevit_engine {
  std::unique_ptr<edgevit::Engine> engine;
  int32_t last_n = 0;
};

namespace {

thread_local std::string t_last_error;

edgevit_status fail(edgevit_status code, std::string message) {
  t_last_error = std::move(message);
  return code;
}

edgevit_status fail(const edgevit::Status& s) {
  return fail(static_cast<edgevit_status>(s.code()), s.message());
}

// Runs `body` (returning edgevit_status); any exception becomes EDGEVIT_INTERNAL.
template <typename F>
edgevit_status guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(EDGEVIT_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return fail(EDGEVIT_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(EDGEVIT_INTERNAL, "internal error: unknown exception");
  }
}

void copy_cstr(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// Output `name` of `e` (runtime/outputs.h): its host values and per-image dimensions, or nullptr when the
// engine does not produce it. ABI 1's "logits" of a model without a classifier head is its pre_logits.
const float* output_named(const edgevit::Engine& e, const char* name, std::vector<int64_t>* dims) {
  edgevit::OutputKind k;
  if (!edgevit::parse_output_kind(name, &k)) return nullptr;
  if (!e.outputs().has(k) && k == edgevit::OutputKind::kLogits) k = edgevit::OutputKind::kPreLogits;
  if (!e.outputs().has(k)) return nullptr;
  *dims = e.output_dims(k);
  return e.output(k);
}

// edgevit_plan_info as ABI 1 defines it; later versions append fields and still accept this size.
constexpr size_t kPlanInfoV1Size = sizeof(edgevit_plan_info);

std::string output_names(const edgevit::Engine& e) {
  std::string s = e.outputs().to_string();
  if (!e.outputs().has(edgevit::OutputKind::kLogits)) s += ", logits (= pre_logits: no classifier head)";
  return s;
}

edgevit_status unknown_output(const char* fn, const edgevit::Engine& e, const char* name) {
  return fail(EDGEVIT_INVALID_ARGUMENT, std::string(fn) + ": no output '" + name + "' (this engine has: " +
                                            output_names(e) + "; tokens only with edgevit_options.tokens)");
}

}  // namespace

extern "C" {

int edgevit_abi_version(void) { return EDGEVIT_ABI_VERSION; }

const char* edgevit_version(void) { return edgevit::library_version(); }

const char* edgevit_status_name(edgevit_status s) {
  if (s == EDGEVIT_BUFFER_TOO_SMALL) return "buffer_too_small";
  if (s < EDGEVIT_OK || s > EDGEVIT_INTERNAL) return "unknown";
  return edgevit::status_code_name(static_cast<edgevit::StatusCode>(s));
}

const char* edgevit_last_error(void) { return t_last_error.c_str(); }

edgevit_status edgevit_engine_create(const char* config_path, const char* device, const edgevit_options* options,
                                     edgevit_engine** out) {
  return guarded([&]() -> edgevit_status {
    if (out == nullptr) return fail(EDGEVIT_INVALID_ARGUMENT, "edgevit_engine_create: out is NULL");
    *out = nullptr;
    if (config_path == nullptr) return fail(EDGEVIT_INVALID_ARGUMENT, "edgevit_engine_create: config_path is NULL");
    edgevit::EngineOptions eo;
    if (options != nullptr) {
      if (options->struct_size < sizeof(uint32_t) + 2 * sizeof(int32_t)) {
        return fail(EDGEVIT_INVALID_ARGUMENT, "edgevit_engine_create: options->struct_size " +
                                                  std::to_string(options->struct_size) + " is too small");
      }
      if (options->max_batch < 0 || options->threads < 0) {
        return fail(EDGEVIT_INVALID_ARGUMENT, "edgevit_engine_create: options->max_batch and threads must be >= 0");
      }
      eo.plan.batch = options->max_batch;
      eo.threads = options->threads;
      // ABI 1 callers compiled before `tokens` existed pass a struct that ends before it.
      if (options->struct_size >= offsetof(edgevit_options, tokens) + sizeof(options->tokens))
        eo.plan.tokens = options->tokens != 0;
    }
    auto engine = edgevit::open_engine(config_path, device == nullptr ? "auto" : device, eo);
    if (!engine.ok()) return fail(engine.status());
    auto handle = std::make_unique<edgevit_engine>();
    handle->engine = std::move(engine).value();
    *out = handle.release();
    return EDGEVIT_OK;
  });
}

void edgevit_engine_destroy(edgevit_engine* engine) { delete engine; }

edgevit_status edgevit_engine_plan(const edgevit_engine* engine, edgevit_plan_info* info) {
  return guarded([&]() -> edgevit_status {
    if (engine == nullptr || info == nullptr) return fail(EDGEVIT_INVALID_ARGUMENT, "edgevit_engine_plan: NULL argument");
    if (info->struct_size < kPlanInfoV1Size) {
      return fail(EDGEVIT_INVALID_ARGUMENT, "edgevit_engine_plan: info->struct_size " +
                                                std::to_string(info->struct_size) + " is smaller than ABI 1's " +
                                                std::to_string(kPlanInfoV1Size));
    }
    const edgevit::Engine& e = *engine->engine;
    const edgevit::Plan& p = e.plan();
    const edgevit::VitArch& a = e.spec().arch;
    edgevit_plan_info r{};
    r.struct_size = info->struct_size;
    r.arena_bytes = p.arena_bytes;
    r.total_bytes = p.total_bytes;
    r.budget_bytes = p.budget_bytes;
    r.weights_bytes = p.weights_bytes;
    r.max_batch = e.max_batch();
    r.channels = a.in_chans;
    r.height = a.img_h;
    r.width = a.img_w;
    r.output_dim = e.output_dim();
    r.embed_dim = e.embed_dim();
    r.plan_hash = p.hash;
    copy_cstr(r.plan_hash_hex, sizeof r.plan_hash_hex, p.hash_hex());
    copy_cstr(r.device, sizeof r.device, p.device.name);
    copy_cstr(r.precision, sizeof r.precision, edgevit::to_string(p.graph.precision));
    copy_cstr(r.attention_kernel, sizeof r.attention_kernel, p.attention_kernel);
    // A caller built against an older header passes a shorter struct: fill only what it has.
    std::memcpy(info, &r, std::min<size_t>(info->struct_size, sizeof r));
    return EDGEVIT_OK;
  });
}

float* edgevit_engine_input_buffer(edgevit_engine* engine, size_t* numel) {
  if (engine == nullptr) {
    if (numel != nullptr) *numel = 0;
    return nullptr;
  }
  if (numel != nullptr) {
    *numel = static_cast<size_t>(engine->engine->max_batch()) * static_cast<size_t>(engine->engine->input_numel_per_image());
  }
  return engine->engine->input_buffer();
}

edgevit_status edgevit_engine_load_image(edgevit_engine* engine, const char* path, int32_t index) {
  return guarded([&]() -> edgevit_status {
    if (engine == nullptr || path == nullptr) return fail(EDGEVIT_INVALID_ARGUMENT, "edgevit_engine_load_image: NULL argument");
    edgevit::Engine& e = *engine->engine;
    if (index < 0 || index >= e.max_batch()) {
      return fail(EDGEVIT_INVALID_ARGUMENT, "edgevit_engine_load_image: index " + std::to_string(index) +
                                                " is outside the input buffer's 0.." + std::to_string(e.max_batch() - 1));
    }
    const edgevit::Status s =
        edgevit::load_image_file(path, e.spec(), e.input_buffer() + int64_t{index} * e.input_numel_per_image());
    return s.ok() ? EDGEVIT_OK : fail(s);
  });
}

edgevit_status edgevit_engine_infer(edgevit_engine* engine, const float* input, int32_t n) {
  return guarded([&]() -> edgevit_status {
    if (engine == nullptr || input == nullptr) return fail(EDGEVIT_INVALID_ARGUMENT, "edgevit_engine_infer: NULL argument");
    edgevit::Engine& e = *engine->engine;
    if (n < 1 || n > e.max_batch()) {
      return fail(EDGEVIT_INVALID_ARGUMENT, "edgevit_engine_infer: n = " + std::to_string(n) +
                                                " is outside 1.." + std::to_string(e.max_batch()) + " (the plan's batch)");
    }
    engine->last_n = 0;
    const edgevit::Status s = e.infer(input, n);
    if (!s.ok()) return fail(s);
    engine->last_n = n;
    return EDGEVIT_OK;
  });
}

edgevit_status edgevit_engine_output(const edgevit_engine* engine, const char* name, float* dst, size_t capacity,
                                     int64_t* rows, int64_t* cols) {
  return guarded([&]() -> edgevit_status {
    if (engine == nullptr || name == nullptr) return fail(EDGEVIT_INVALID_ARGUMENT, "edgevit_engine_output: NULL argument");
    const edgevit::Engine& e = *engine->engine;
    std::vector<int64_t> dims;
    const float* data = output_named(e, name, &dims);
    if (data == nullptr) return unknown_output("edgevit_engine_output", e, name);
    if (engine->last_n == 0) {
      return fail(EDGEVIT_INVALID_ARGUMENT, std::string("edgevit_engine_output: no output '") + name +
                                                "' yet: no successful edgevit_engine_infer on this engine");
    }
    int64_t c = 1;
    for (int64_t d : dims) c *= d;
    const int64_t r = engine->last_n;
    if (rows != nullptr) *rows = r;
    if (cols != nullptr) *cols = c;
    const size_t need = static_cast<size_t>(r * c);
    if (capacity < need || dst == nullptr) {
      return fail(EDGEVIT_BUFFER_TOO_SMALL, std::string("edgevit_engine_output: '") + name + "' is " + std::to_string(r) +
                                                " x " + std::to_string(c) + " = " + std::to_string(need) +
                                                " floats; the buffer holds " + std::to_string(capacity));
    }
    std::memcpy(dst, data, need * sizeof(float));
    return EDGEVIT_OK;
  });
}

edgevit_status edgevit_engine_output_dims(const edgevit_engine* engine, const char* name, int64_t* dims,
                                         int32_t capacity, int32_t* ndim) {
  return guarded([&]() -> edgevit_status {
    if (engine == nullptr || name == nullptr || ndim == nullptr)
      return fail(EDGEVIT_INVALID_ARGUMENT, "edgevit_engine_output_dims: NULL argument");
    const edgevit::Engine& e = *engine->engine;
    std::vector<int64_t> d;
    if (output_named(e, name, &d) == nullptr) return unknown_output("edgevit_engine_output_dims", e, name);
    *ndim = static_cast<int32_t>(d.size());
    if (capacity < *ndim || dims == nullptr)
      return fail(EDGEVIT_BUFFER_TOO_SMALL, std::string("edgevit_engine_output_dims: '") + name + "' has " +
                                                std::to_string(d.size()) + " dimensions; the buffer holds " +
                                                std::to_string(capacity));
    std::copy(d.begin(), d.end(), dims);
    return EDGEVIT_OK;
  });
}

}  // extern "C"
