// edgevit's public C++ API: the one header a program embedding edgevit includes (installed as
// <edgevit/edgevit.hpp>; find_package(edgevit CONFIG) -> edgevit::edgevit, or pkg-config edgevit).
//
//   auto engine = edgevit::open_engine("vit-digits.yaml", "auto", {});  // Result<unique_ptr<Engine>>
//   if (!engine.ok()) { puts(engine.status().to_string().c_str()); return 1; }
//   float* in = (*engine)->input_buffer();                              // (max_batch, C, H, W) float32
//   ... write n images ..., then (*engine)->infer(in, n) and read (*engine)->logits()  // (n, output_dim)
//
// What it brings: Engine (runtime/engine.h), Plan (runtime/plan.h: arena and total bytes, plan hash),
// ModelSpec and load_model_spec (runtime/config.h), DeviceProfile and the profile registry / detection
// (platform/), Status and Result (base/status.h), image decoding (runtime/inputs.h) and labels. Those
// headers are installed beside this one; kernels and the executor are not part of the API. The C++ API
// follows the library's version (no ABI promise across versions); the C API (edgevit.h) is the stable one.
// Errors are values (Status / Result); nothing here throws except std::bad_alloc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "platform/detect.h"
#include "platform/device_profile.h"
#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/inputs.h"
#include "runtime/model_spec.h"
#include "runtime/plan.h"
#include "base/status.h"

namespace edgevit {

// "0.1.0": the library's version (the project version it was built from).
const char* library_version();

// Device-profile directories for a model config at `config_path`, most specific first, only those that
// exist: $EDGEVIT_CONFIG_DIR/devices, the config's sibling devices/ (config/models/x.yaml ->
// config/devices), then <this library>/../share/edgevit/config/devices and the running program's own
// (default_config_dirs).
std::vector<std::string> device_dirs_for(const std::string& config_path);

// A device profile by name ("orin-nx-16gb", a path to a profile YAML) or "auto"/"" (detect_device: a
// Jetson's device tree, else the CUDA GPU, else the host CPU), searched in `dirs`.
Result<DeviceProfile> resolve_device(const std::string& name, const std::vector<std::string>& dirs);

// Loads the model config, resolves `device` (as resolve_device, in device_dirs_for(config_path)) and
// creates the engine (Engine::create: plan, one arena, weights). options.plan.batch == 0 plans the
// config's runtime.max_batch. The caller owns the returned engine.
Result<std::unique_ptr<Engine>> open_engine(const std::string& config_path, const std::string& device,
                                            const EngineOptions& options);

}  // namespace edgevit
