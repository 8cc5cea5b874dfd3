// `edgevit calibrate` and `edgevit compare` (docs/int8.md): INT8 scales from calibration images, and the
// layer-wise error between two precisions on the same input. Both run on the host CPU.
#include "programs/edgevit/cmd_int8.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/inputs.h"
#include "runtime/int8_calibrate.h"

namespace ev = edgevit;
namespace fs = std::filesystem;

namespace {

int fail(const ev::Status& s) {
  std::fprintf(stderr, "edgevit: error: %s\n", s.message().c_str());
  return ev::exit_code_for(s.code());
}

// A directory's regular files in name order (each an image), or one file (an image or a safetensors file
// with tensor `input` [N,C,H,W]); at most `max_samples` images (0: all).
ev::Result<ev::InputBatch> load_images(const std::string& path, const ev::ModelSpec& spec, int max_samples) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    EV_ASSIGN_OR_RETURN(ev::InputBatch b, ev::load_input_file(path, spec));
    if (max_samples > 0 && b.count > max_samples) {
      b.data.resize(b.data.size() / static_cast<size_t>(b.count) * static_cast<size_t>(max_samples));
      b.count = max_samples;
    }
    return b;
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, ec))
    if (entry.is_regular_file(ec)) files.push_back(entry.path().string());
  if (ec) return ev::io_error(path + ": cannot list the directory: " + ec.message());
  std::sort(files.begin(), files.end());
  if (max_samples > 0 && static_cast<int>(files.size()) > max_samples) files.resize(static_cast<size_t>(max_samples));
  if (files.empty()) return ev::input_error(path + ": no image files in the directory");
  const ev::VitArch& a = spec.arch;
  const size_t per = static_cast<size_t>(a.in_chans) * a.img_h * a.img_w;
  ev::InputBatch b;
  b.count = static_cast<int>(files.size());
  b.data.resize(per * files.size());
  for (size_t i = 0; i < files.size(); ++i)
    EV_RETURN_IF_ERROR(ev::load_image_file(files[i], spec, b.data.data() + i * per));
  return b;
}

void print_layers(const std::vector<ev::LayerError>& layers, double warn_db, const char* a, const char* b) {
  std::printf("%-30s %12s %10s %12s   (%s vs %s)\n", "tensor", "rel. error", "SQNR dB", "max |diff|", b, a);
  int low = 0;
  for (const ev::LayerError& l : layers) {
    const bool bad = l.sqnr_db < warn_db;
    low += bad;
    std::printf("%-30s %12.3e %10.1f %12.3e%s\n", l.tensor.c_str(), l.rel_error, l.sqnr_db, l.max_abs,
                bad ? "  < threshold" : "");
  }
  if (low > 0)
    std::fprintf(stderr, "edgevit: warning: %d tensor%s under %.1f dB SQNR (see the table; docs/int8.md says what helps)\n",
                 low, low == 1 ? "" : "s", warn_db);
}

ev::Result<ev::DeviceProfile> host_profile(const std::vector<std::string>& dev_dirs) {
  return ev::find_device_profile("host-cpu", dev_dirs);
}

ev::Result<ev::Precision> precision_named(const std::string& s) {
  if (s == "fp32") return ev::Precision::kFp32;
  if (s == "int8") return ev::Precision::kInt8;
  return ev::invalid_argument("--precisions: '" + s + "' is not fp32 or int8 (compare runs on the CPU)");
}

}  // namespace

Int8Commands add_int8_commands(CLI::App& app) {
  Int8Commands c;
  c.calibrate = app.add_subcommand("calibrate", "INT8 scales from calibration images, and an int8 model config");
  c.calibrate->add_option("model", c.model, "model YAML")->required();
  c.calibrate->add_option("--images", c.images,
                          "directory of images, or a safetensors file with tensor 'input' [N,C,H,W]")->required();
  c.calibrate->add_option("--method", c.method, "minmax | percentile (99.99%) | mse (default)")
      ->check(CLI::IsMember({"minmax", "percentile", "mse"}));
  c.calibrate->add_option("--samples", c.samples, "images to use (0 = all)")->check(CLI::Range(0, 1000000));
  c.calibrate->add_option("--warn-sqnr", c.warn_db, "warn about tensors under this SQNR in dB (default 20)");
  c.calibrate->add_option("--threads,-t", c.threads, "CPU threads of the fp32 engine")->check(CLI::Range(1, 4096));
  c.calibrate->add_flag("--ln-fold", c.ln_fold,
                        "RepQ-ViT: per-channel factors folded into each block's norm1/norm2 and the next weight "
                        "(qkv, fc1), written into the scale file (docs/int8.md)");
  c.calibrate->add_flag("--bias-correction,!--no-bias-correction", c.bias_correction,
                        "each block GEMM input's per-channel mean in the scale file, from which the loader takes "
                        "the weights' mean rounding error out of their biases (default on; docs/int8.md)");
  c.calibrate->add_option("-o,--output", c.output, "int8 model YAML to write (the scales go beside it)")->required();
  c.compare = app.add_subcommand("compare", "layer-wise error between two precisions on the same input (CPU)");
  c.compare->add_option("model", c.cmp_model, "model YAML")->required();
  c.compare->add_option("--precisions", c.precisions, "two of fp32,int8 (default fp32,int8)");
  c.compare->add_option("--input,-i", c.cmp_input, "image, directory, or safetensors with tensor 'input'")->required();
  c.compare->add_option("--samples", c.cmp_samples, "images to use (0 = all)")->check(CLI::Range(0, 1000000));
  c.compare->add_option("--warn-sqnr", c.cmp_warn_db, "mark tensors under this SQNR in dB (default 20)");
  c.compare->add_option("--threads,-t", c.threads, "CPU threads")->check(CLI::Range(1, 4096));
  return c;
}

int cmd_calibrate(const Int8Commands& c, const std::vector<std::string>& dev_dirs) {
  auto spec = ev::load_model_spec(c.model);
  if (!spec.ok()) return fail(spec.status());
  auto dev = host_profile(dev_dirs);
  if (!dev.ok()) return fail(dev.status());
  auto images = load_images(c.images, *spec, c.samples);
  if (!images.ok()) return fail(images.status());
  ev::CalibOptions o;
  o.method = c.method == "minmax" ? ev::CalibMethod::kMinmax
             : c.method == "mse"  ? ev::CalibMethod::kMse
                                  : ev::CalibMethod::kPercentile;
  o.threads = c.threads;
  o.ln_fold = c.ln_fold;
  o.bias_correction = c.bias_correction;
  ev::ModelSpec fp32 = *spec;
  fp32.precision = ev::Precision::kFp32;
  auto scales = ev::calibrate_int8(fp32, *dev, images->data.data(), images->count, o);
  if (!scales.ok()) return fail(scales.status());
  std::string stem = c.output;
  if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".yaml") == 0) stem.resize(stem.size() - 5);
  ev::ModelSpec int8 = fp32;
  int8.precision = ev::Precision::kInt8;
  // the model's mode unless it needs no scale file (per_token): then the default, which reads this one
  if (int8.int8_activations == ev::Int8Activations::kPerToken) int8.int8_activations = ev::Int8Activations::kNormPerToken;
  int8.int8_scales_path = stem + ".scales.safetensors";
  ev::Status s = ev::write_int8_scales(int8.int8_scales_path, *scales);
  if (s.ok()) s = ev::save_model_spec(int8, c.output);
  if (!s.ok()) return fail(s);
  std::string extra;
  if (c.ln_fold) extra += " and " + std::to_string(scales->channel_factors.size()) + " channel factors";
  if (c.bias_correction) extra += " and " + std::to_string(scales->input_means.size()) + " input means";
  std::printf("calibrated %s on %d image%s (%s%s%s): %zu scales%s -> %s; config -> %s\n", spec->name.c_str(),
              images->count, images->count == 1 ? "" : "s", scales->method.c_str(), c.ln_fold ? ", LayerNorm fold" : "",
              c.bias_correction ? ", bias correction" : "", scales->input_scales.size(), extra.c_str(),
              int8.int8_scales_path.c_str(), c.output.c_str());
  auto layers = ev::compare_layers(fp32, ev::Precision::kFp32, int8, ev::Precision::kInt8, *dev, images->data.data(),
                                   images->count, c.threads);
  if (!layers.ok()) return fail(layers.status());
  std::printf("\nINT8 against fp32 on the calibration images:\n");
  print_layers(*layers, c.warn_db, "fp32", "int8");
  return 0;
}

int cmd_compare(const Int8Commands& c, const std::vector<std::string>& dev_dirs) {
  auto spec = ev::load_model_spec(c.cmp_model);
  if (!spec.ok()) return fail(spec.status());
  const size_t comma = c.precisions.find(',');
  if (comma == std::string::npos)
    return fail(ev::invalid_argument("--precisions: expected two precisions, e.g. fp32,int8"));
  auto pa = precision_named(c.precisions.substr(0, comma));
  auto pb = precision_named(c.precisions.substr(comma + 1));
  if (!pa.ok()) return fail(pa.status());
  if (!pb.ok()) return fail(pb.status());
  auto dev = host_profile(dev_dirs);
  if (!dev.ok()) return fail(dev.status());
  auto images = load_images(c.cmp_input, *spec, c.cmp_samples);
  if (!images.ok()) return fail(images.status());
  auto layers = ev::compare_layers(*spec, *pa, *spec, *pb, *dev, images->data.data(), images->count, c.threads);
  if (!layers.ok()) return fail(layers.status());
  std::printf("%s: %d image%s\n", spec->name.c_str(), images->count, images->count == 1 ? "" : "s");
  print_layers(*layers, c.cmp_warn_db, ev::to_string(*pa), ev::to_string(*pb));
  return 0;
}
