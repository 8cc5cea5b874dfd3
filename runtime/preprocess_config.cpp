#include "runtime/preprocess_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file_io.h"

namespace edgevit {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int64_t kMaxConfigBytes = int64_t{4} << 20;  // a preprocessing config is a few hundred bytes
constexpr int64_t kMaxSide = 1 << 16;

Result<json> read_json(const std::string& path) {
  EV_ASSIGN_OR_RETURN(const std::string text,
                      read_regular_file(path, "preprocessing config", kMaxConfigBytes, StatusCode::kConfigError));
  try {
    json j = json::parse(text);
    if (!j.is_object()) return config_error(path + ": expected a JSON object");
    return j;
  } catch (const json::exception& e) {
    return config_error(path + ": not valid JSON: " + e.what());
  }
}

Status key_error(const std::string& path, const std::string& key, const std::string& what, const json& v) {
  return config_error(path + ": key '" + key + "': expected " + what + ", got " + v.dump());
}

Result<bool> get_bool(const json& cfg, const std::string& path, const char* key, bool fallback) {
  if (!cfg.contains(key)) return fallback;
  if (!cfg[key].is_boolean()) return key_error(path, key, "true or false", cfg[key]);
  return cfg[key].get<bool>();
}

Result<int> side(const json& v, const std::string& path, const std::string& key) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > static_cast<uint64_t>(kMaxSide))
    return key_error(path, key, "a positive integer", v);
  return static_cast<int>(v.get<uint64_t>());
}

// The mean or std list, fitted to the model's channels: 3 values average to 1 for a grey model.
Result<std::vector<double>> channel_values(const json& v, const std::string& path, const std::string& key,
                                           int in_chans, bool positive) {
  if (v.is_number()) return std::vector<double>(static_cast<size_t>(in_chans), v.get<double>());
  if (!v.is_array() || v.empty()) return key_error(path, key, "a list of numbers", v);
  std::vector<double> out;
  for (const json& x : v) {
    if (!x.is_number() || !std::isfinite(x.get<double>()) || (positive && !(x.get<double>() > 0)))
      return key_error(path, key, positive ? "a list of positive numbers" : "a list of numbers", v);
    out.push_back(x.get<double>());
  }
  if (static_cast<int>(out.size()) == in_chans) return out;
  if (in_chans == 1) {
    double sum = 0;
    for (double x : out) sum += x;
    return std::vector<double>{sum / static_cast<double>(out.size())};
  }
  return config_error(path + ": key '" + key + "' has " + std::to_string(out.size()) + " values, the model has " +
                      std::to_string(in_chans) + " input channels");
}

Result<Interpolation> pil_resample(const json& v, const std::string& path) {
  if (!v.is_number_integer()) return key_error(path, "resample", "a PIL resampling filter number", v);
  switch (v.get<int64_t>()) {
    case 0: return Interpolation::kNearest;
    case 2: return Interpolation::kBilinear;
    case 3: return Interpolation::kBicubic;
    default:
      return unsupported(path + ": key 'resample': " + v.dump() +
                         " (PIL: 1 lanczos, 4 box, 5 hamming) is not supported; edgevit resamples with nearest (0), "
                         "bilinear (2) or bicubic (3)");
  }
}

Result<Interpolation> timm_interpolation(const json& v, const std::string& path) {
  const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  if (s == "bilinear") return Interpolation::kBilinear;
  if (s == "bicubic") return Interpolation::kBicubic;
  if (s == "nearest") return Interpolation::kNearest;
  return unsupported(path + ": key 'interpolation': '" + s +
                     "' is not supported (edgevit resamples with bilinear, bicubic or nearest)");
}

// {height, width} (or an int: square) -> height, width.
Status hw(const json& v, const std::string& path, const std::string& key, int* h, int* w) {
  if (v.is_object() && v.contains("height") && v.contains("width")) {
    EV_ASSIGN_OR_RETURN(*h, side(v["height"], path, key + ".height"));
    EV_ASSIGN_OR_RETURN(*w, side(v["width"], path, key + ".width"));
    return Status::Ok();
  }
  EV_ASSIGN_OR_RETURN(*h, side(v, path, key));
  *w = *h;
  return Status::Ok();
}

// Sizes are written width x height, as Pillow and the plan do.
Status must_end_at(const std::string& path, const std::string& key, int h, int w, int img_h, int img_w) {
  if (h == img_h && w == img_w) return Status::Ok();
  return unsupported(path + ": key '" + key + "': the pipeline ends at " + std::to_string(w) + "x" +
                     std::to_string(h) + " but the model's input is " + std::to_string(img_w) + "x" +
                     std::to_string(img_h));
}

std::string join(const std::vector<double>& v) {
  std::string r;
  for (double x : v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", x);
    r += (r.empty() ? "" : ", ") + std::string(buf);
  }
  return "[" + r + "]";
}

std::string describe(const Preprocess& p) {
  const std::string wxh = std::to_string(p.resize_w) + "x" + std::to_string(p.resize_h) + " (width x height)";
  std::string r = p.resize_mode == ResizeMode::kExact       ? "resize to " + wxh
                  : p.resize_mode == ResizeMode::kKeepRatio ? "resize keeping the aspect ratio to cover " + wxh
                                                            : "shorter side to " + std::to_string(p.resize);
  if (p.crop_pct > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", p.crop_pct);
    r += " (crop_pct " + std::string(buf) + ")";
  }
  return r + ", " + to_string(p.interpolation) + ", centre crop (" + to_string(p.crop_rounding) +
         "), mean " + join(p.mean) + ", std " + join(p.std);
}

// The HF pipeline's output is the model's img_h x img_w: the centre crop (do_crop), else the resize's
// fixed size (out_h x out_w; -1: the image's aspect decides), and the resize reaches the crop.
Status hf_ends_at_input(const json& cfg, const std::string& path, bool do_crop, int out_h, int out_w,
                        const Preprocess& p, int img_h, int img_w) {
  if (do_crop) {
    int ch = img_h, cw = img_w;
    if (cfg.contains("crop_size")) EV_RETURN_IF_ERROR(hw(cfg["crop_size"], path, "crop_size", &ch, &cw));
    EV_RETURN_IF_ERROR(must_end_at(path, "crop_size", ch, cw, img_h, img_w));
  } else if (out_h < 0) {
    return unsupported(path + ": a shortest_edge resize without a centre crop gives images of varying size");
  } else {
    EV_RETURN_IF_ERROR(must_end_at(path, "size", out_h, out_w, img_h, img_w));
  }
  // A shortest-edge resize must reach the crop's longer side, whatever the image's orientation.
  const bool short_edge = p.resize_mode == ResizeMode::kShortestEdge;
  if ((short_edge && p.resize < std::max(img_h, img_w)) || p.resize_h < img_h || p.resize_w < img_w)
    return unsupported(path + ": key 'size': smaller than the crop " + std::to_string(img_w) + "x" +
                       std::to_string(img_h));
  return Status::Ok();
}

}  // namespace

Result<bool> read_hf_preprocessor_config(const std::string& path, int img_h, int img_w, int in_chans,
                                         Preprocess* pre) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  EV_ASSIGN_OR_RETURN(const json cfg, read_json(path));
  Preprocess p;
  p.crop_rounding = CropRounding::kFloor;  // transformers' center_crop: top = (h - crop_h) // 2
  p.crop_pct = 0;
  p.interpolation = Interpolation::kBilinear;  // BaseImageProcessor's resize default
  if (cfg.contains("resample")) {
    EV_ASSIGN_OR_RETURN(p.interpolation, pil_resample(cfg["resample"], path));
  }
  EV_ASSIGN_OR_RETURN(const bool do_crop, get_bool(cfg, path, "do_center_crop", cfg.contains("crop_size")));
  EV_ASSIGN_OR_RETURN(const bool do_resize, get_bool(cfg, path, "do_resize", true));
  int out_h = -1, out_w = -1;  // the image's size after resizing; -1: depends on the image
  if (do_resize && cfg.contains("size")) {
    const json& size = cfg["size"];
    if (size.is_object() && size.contains("shortest_edge")) {
      if (size.contains("longest_edge"))
        return unsupported(path + ": key 'size': shortest_edge with longest_edge is not supported");
      p.resize_mode = ResizeMode::kShortestEdge;
      EV_ASSIGN_OR_RETURN(p.resize, side(size["shortest_edge"], path, "size.shortest_edge"));
      p.resize_h = p.resize_w = p.resize;
    } else if (size.is_number() && do_crop) {
      // An int size with a centre crop (CLIP's and BiT's old files): the shorter side, as their processors
      // read it (get_size_dict(size, default_to_square=False)).
      EV_ASSIGN_OR_RETURN(p.resize, side(size, path, "size"));
      p.resize_mode = ResizeMode::kShortestEdge;
      p.resize_h = p.resize_w = p.resize;
    } else {
      EV_RETURN_IF_ERROR(hw(size, path, "size", &p.resize_h, &p.resize_w));
      p.resize_mode = ResizeMode::kExact;
      p.resize = std::min(p.resize_h, p.resize_w);
      out_h = p.resize_h;
      out_w = p.resize_w;
    }
  } else {
    // No size: ViTImageProcessor's default, the model's square (do_resize false: images must already be
    // that size for the processor's output to batch, so resizing them to it changes nothing).
    p.resize_mode = ResizeMode::kExact;
    p.resize_h = out_h = img_h;
    p.resize_w = out_w = img_w;
    p.resize = std::min(img_h, img_w);
  }
  EV_RETURN_IF_ERROR(hf_ends_at_input(cfg, path, do_crop, out_h, out_w, p, img_h, img_w));
  EV_ASSIGN_OR_RETURN(const bool do_rescale, get_bool(cfg, path, "do_rescale", true));
  p.rescale = 1.0 / 255;
  if (do_rescale && cfg.contains("rescale_factor")) {
    const json& v = cfg["rescale_factor"];
    if (!v.is_number() || !(v.get<double>() > 0 && v.get<double>() <= 1))
      return key_error(path, "rescale_factor", "a number in (0, 1]", v);
    p.rescale = v.get<double>();
  }
  if (!do_rescale) p.rescale = 1.0;
  EV_ASSIGN_OR_RETURN(const bool do_normalize, get_bool(cfg, path, "do_normalize", true));
  p.mean.assign(static_cast<size_t>(in_chans), 0.0);
  p.std.assign(static_cast<size_t>(in_chans), 1.0);
  if (do_normalize) {
    // BaseImageProcessor's defaults are ImageNet's; ViT's are 0.5 (IMAGENET_STANDARD), so a file without
    // them is named in the note.
    const Preprocess imagenet;
    EV_ASSIGN_OR_RETURN(p.mean, channel_values(cfg.contains("image_mean") ? cfg["image_mean"] : json(imagenet.mean),
                                               path, "image_mean", in_chans, false));
    EV_ASSIGN_OR_RETURN(p.std, channel_values(cfg.contains("image_std") ? cfg["image_std"] : json(imagenet.std),
                                              path, "image_std", in_chans, true));
  }
  p.note = path + ": " + describe(p);
  if (!(do_resize && cfg.contains("size")))
    p.note += " (no size: the model's " + std::to_string(img_w) + "x" + std::to_string(img_h) + ")";
  if (do_normalize && (!cfg.contains("image_mean") || !cfg.contains("image_std")))
    p.note += " (no image_mean/image_std: ImageNet's used)";
  *pre = p;
  return true;
}

Result<bool> read_timm_pretrained_cfg(const std::string& path, int img_h, int img_w, int in_chans,
                                      Preprocess* pre) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  EV_ASSIGN_OR_RETURN(const json file, read_json(path));
  const bool nested = file.contains("pretrained_cfg") && file["pretrained_cfg"].is_object();
  const json& cfg = nested ? file["pretrained_cfg"] : file;
  const std::string where = nested ? "pretrained_cfg." : "";
  bool any = false;
  for (const char* key : {"input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode"})
    any = any || cfg.contains(key);
  if (!any) return false;  // a Hugging Face config.json, or a timm one without preprocessing keys

  Preprocess p;
  p.crop_rounding = CropRounding::kHalfEven;  // torchvision's CenterCrop
  p.rescale = 1.0 / 255;                      // ToTensor
  std::string extra;
  if (cfg.contains("input_size")) {
    const json& v = cfg["input_size"];
    if (!v.is_array() || v.size() != 3) return key_error(path, where + "input_size", "[C, H, W]", v);
    EV_ASSIGN_OR_RETURN(const int h, side(v[1], path, where + "input_size"));
    EV_ASSIGN_OR_RETURN(const int w, side(v[2], path, where + "input_size"));
    const std::string model = std::to_string(img_w) + "x" + std::to_string(img_h);
    if (h != img_h || w != img_w)
      extra = "; its input_size " + std::to_string(w) + "x" + std::to_string(h) + " is not the model's " + model +
              ": crop_pct applied to " + model;
  }
  p.interpolation = Interpolation::kBilinear;  // timm's default_cfg
  if (cfg.contains("interpolation")) {
    EV_ASSIGN_OR_RETURN(p.interpolation, timm_interpolation(cfg["interpolation"], path));
  }
  p.crop_pct = 0.875;  // timm.data.DEFAULT_CROP_PCT
  if (cfg.contains("crop_pct")) {
    const json& v = cfg["crop_pct"];
    if (!v.is_number() || !(v.get<double>() >= 0.05 && v.get<double>() <= 1.0))
      return key_error(path, where + "crop_pct", "a number in [0.05, 1]", v);
    p.crop_pct = v.get<double>();
  }
  const std::string mode = cfg.contains("crop_mode") && cfg["crop_mode"].is_string()
                               ? cfg["crop_mode"].get<std::string>()
                               : "center";
  // transforms_imagenet_eval: scale_size = (floor(H / crop_pct), floor(W / crop_pct)).
  p.resize_h = static_cast<int>(std::floor(img_h / p.crop_pct));
  p.resize_w = static_cast<int>(std::floor(img_w / p.crop_pct));
  p.resize = std::min(p.resize_h, p.resize_w);
  if (mode == "center" && p.resize_h == p.resize_w) {
    p.resize_mode = ResizeMode::kShortestEdge;  // Resize(scale_size[0]): the shorter side
  } else if (mode == "center") {
    // ResizeKeepRatio(scale_size), built without the interpolation: its default, bilinear (timm 0.8 - 1.0).
    p.resize_mode = ResizeMode::kKeepRatio;
    if (p.interpolation != Interpolation::kBilinear)
      extra += "; non-square input: timm's ResizeKeepRatio resizes bilinear, not " +
               std::string(to_string(p.interpolation));
    p.interpolation = Interpolation::kBilinear;
  } else if (mode == "squash") {
    p.resize_mode = ResizeMode::kExact;
    p.crop_pct = 0;  // written as resize_exact
  } else {
    return unsupported(path + ": key '" + where + "crop_mode': '" + mode +
                       "' is not supported (edgevit reproduces 'center' and 'squash')");
  }
  const Preprocess imagenet;
  EV_ASSIGN_OR_RETURN(p.mean, channel_values(cfg.contains("mean") ? cfg["mean"] : json(imagenet.mean), path,
                                             where + "mean", in_chans, false));
  EV_ASSIGN_OR_RETURN(p.std, channel_values(cfg.contains("std") ? cfg["std"] : json(imagenet.std), path,
                                            where + "std", in_chans, true));
  p.note = path + " (timm " + (nested ? "pretrained_cfg" : "config") + "): " + describe(p) + extra;
  if (!cfg.contains("mean") || !cfg.contains("std")) p.note += " (no mean/std: ImageNet's used)";
  *pre = p;
  return true;
}

Status read_checkpoint_preprocess(ModelSpec* spec) {
  const VitArch& a = spec->arch;
  const fs::path dir = fs::path(spec->weights_path).parent_path();
  const std::string hf = (dir / "preprocessor_config.json").string();
  const std::string timm = (dir / "config.json").string();
  EV_ASSIGN_OR_RETURN(const bool from_hf,
                      read_hf_preprocessor_config(hf, a.img_h, a.img_w, a.in_chans, &spec->preprocess));
  if (from_hf) return Status::Ok();
  EV_ASSIGN_OR_RETURN(const bool from_timm,
                      read_timm_pretrained_cfg(timm, a.img_h, a.img_w, a.in_chans, &spec->preprocess));
  if (from_timm) return Status::Ok();
  Preprocess p;  // the config loader's default: timm's eval transform at crop_pct 1
  p.resize_h = a.img_h;
  p.resize_w = a.img_w;
  p.resize = std::min(a.img_h, a.img_w);
  p.resize_mode = a.square() ? ResizeMode::kShortestEdge : ResizeMode::kKeepRatio;
  for (std::vector<double>* v : {&p.mean, &p.std}) {  // other channel counts: the RGB values' average
    if (static_cast<int>(v->size()) == a.in_chans) continue;
    double sum = 0;
    for (double x : *v) sum += x;
    v->assign(static_cast<size_t>(a.in_chans), sum / static_cast<double>(v->size()));
  }
  p.note = "no preprocessing config beside the checkpoint (" + hf + ", or " + timm +
           " with timm's pretrained_cfg): using defaults, " + describe(p) +
           " (ImageNet's); if the model was trained otherwise (0.5 mean/std, bicubic, crop_pct), edit preprocess: "
           "in the written YAML";
  spec->preprocess = p;
  return Status::Ok();
}

}  // namespace edgevit
