// edgevitd: the model host: resolves the device, loads a model config, labels and plan, creates the Engine
// (after ServerOptions::model_check) and runs its warm-up self-check. Used at start-up and by reload
// (server_reload.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "platform/detect.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/labels.h"
#include "serving/json_text.h"
#include "serving/protocol.h"
#include "serving/server_impl.h"

namespace edgevit::daemon {

Result<DeviceProfile> Server::Impl::resolve_device(const std::string& name) const {
  if (name.empty() || name == "auto") {
    EV_ASSIGN_OR_RETURN(Detection d, detect_device(options.device_dirs));
    return d.profile;
  }
  return find_device_profile(name, options.device_dirs);
}

Status Server::Impl::build_engine(Model* m, const DaemonConfig& cfg, ModelCheck check) {
  if (check != ModelCheck::kNone && options.model_check) {
    EV_RETURN_IF_ERROR(options.model_check(m->spec.source_path, cfg, check == ModelCheck::kWhileServing));
  }
  EngineOptions eo;
  eo.plan.batch = m->batch;
  eo.threads = cfg.threads;
  eo.tune_gemms = cfg.kernel_tuning;
  eo.tune_attention = cfg.kernel_tuning;
  EV_ASSIGN_OR_RETURN(m->engine, Engine::create(m->spec, m->device, eo));
  // The engine's own plan counts the threads it runs (threads 0: the cores it found): health's plan_hash
  // and the memory statement report that one.
  m->plan_hash = m->engine->plan().hash_hex();
  m->total_bytes = m->engine->plan().total_bytes;
  return self_check(m);
}

// Warm-up and self-check on deterministic pseudo-random input (independent of any test data): the
// outputs must be finite and bit-identical over repeated full-batch runs, and an image's logits must not
// depend on its row in the batch. (They may differ in the last bits between batch sizes: OpenBLAS picks
// its sgemm kernel by M. Each answer reports the batch it ran in; docs/daemon.md.)
Status Server::Impl::self_check(Model* m) {
  Engine& e = *m->engine;
  uint32_t s = 0x9e3779b9u;
  for (float& v : m->batch_input) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / 8388608.0f - 1.0f;
  }
  const size_t nout = static_cast<size_t>(m->batch) * m->out_dim;
  std::vector<float> first;
  for (int rep = 0; rep < 3; ++rep) {
    EV_RETURN_IF_ERROR(e.infer(m->batch_input.data(), m->batch).with_context("self-check"));
    const float* out = e.logits();
    for (size_t i = 0; i < nout; ++i)
      if (!std::isfinite(out[i])) return check_failed("self-check: " + m->spec.name + ": non-finite logit at " + std::to_string(i));
    if (rep == 0) {
      first.assign(out, out + nout);
    } else if (std::memcmp(first.data(), out, nout * sizeof(float)) != 0) {
      return check_failed("self-check: " + m->spec.name + ": logits differ between identical runs");
    }
  }
  if (m->batch > 1) {
    // Rotate the batch by one image: every image must get the same logits in its new row.
    std::rotate(m->batch_input.begin(), m->batch_input.begin() + m->per_image, m->batch_input.end());
    EV_RETURN_IF_ERROR(e.infer(m->batch_input.data(), m->batch).with_context("self-check"));
    const size_t od = static_cast<size_t>(m->out_dim);
    for (int i = 0; i < m->batch; ++i) {
      const int was = (i + 1) % m->batch;
      if (std::memcmp(first.data() + was * od, e.logits() + i * od, od * sizeof(float)) != 0)
        return check_failed("self-check: " + m->spec.name + ": an image's logits depend on its row in the batch");
    }
  }
  return Status::Ok();
}

Result<std::shared_ptr<Model>> Server::Impl::load_model(const std::string& path, const DaemonConfig& cfg,
                                                        bool with_engine) {
  auto m = std::make_shared<Model>();
  EV_RETURN_IF_ERROR(require_regular_file(path, "model config"));
  EV_ASSIGN_OR_RETURN(m->spec, load_model_spec(path));
  if (!m->spec.weights_path.empty()) {
    const Status w = require_regular_file(m->spec.weights_path, "checkpoint");  // a missing one: the loader says so
    if (!w.ok() && w.code() != StatusCode::kNotFound) return w;
  }
  EV_ASSIGN_OR_RETURN(m->device, resolve_device(cfg.device));
  if (!m->spec.labels_path.empty()) {
    EV_RETURN_IF_ERROR(require_regular_file(m->spec.labels_path, "labels"));
    EV_ASSIGN_OR_RETURN(m->labels, load_labels(m->spec.labels_path, m->spec.arch.num_classes));
    // Answers carry labels as valid UTF-8 of at most 64 bytes, cut on a character boundary.
    for (std::string& l : m->labels) {
      l = valid_utf8(l);
      l.resize(utf8_prefix_bytes(l, protocol::kMaxLabelBytes));
    }
  }
  m->batch = cfg.max_batch > 0 ? std::min(cfg.max_batch, m->spec.max_batch) : m->spec.max_batch;
  PlanOptions po;
  po.batch = m->batch;
  po.threads = cfg.threads;  // 0: the profile's cores (the engine's plan, with the cores it finds, replaces it)
  EV_ASSIGN_OR_RETURN(Plan plan, make_plan(m->spec, m->device, po));
  if (!plan.fits) return does_not_fit(path + ": " + does_not_fit_message(plan));
  m->plan_hash = plan.hash_hex();
  m->total_bytes = plan.total_bytes;
  m->budget_bytes = plan.budget_bytes;
  const VitArch& a = m->spec.arch;
  m->per_image = static_cast<int64_t>(a.in_chans) * a.img_h * a.img_w;
  m->out_dim = a.num_classes > 0 ? a.num_classes : a.embed_dim;
  m->batch_input.assign(static_cast<size_t>(m->per_image) * m->batch, 0.f);
  if (with_engine) EV_RETURN_IF_ERROR(build_engine(m.get(), cfg, ModelCheck::kAlone));
  return m;
}

}  // namespace edgevit::daemon
