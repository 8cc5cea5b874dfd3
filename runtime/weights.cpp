#include "runtime/weights.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>

#include "kernels/cpu/kernels.h"
#include "runtime/weights_util.h"

namespace edgevit {

using namespace weights_detail;

std::vector<std::string> expected_names(const VitArch& a) {
  std::vector<std::string> n = {"patch_embed.proj.weight"};
  if (a.patch_bias) n.push_back("patch_embed.proj.bias");
  if (a.class_token) n.push_back("cls_token");
  if (a.dist_token) n.push_back("dist_token");
  if (a.reg_tokens > 0) n.push_back("reg_token");
  n.push_back("pos_embed");
  if (a.pre_norm) {
    n.push_back("norm_pre.weight");
    n.push_back("norm_pre.bias");
  }
  for (int i = 0; i < a.depth; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    for (const char* m : {"norm1.weight", "norm1.bias", "attn.qkv.weight"}) n.push_back(b + m);
    if (a.qkv_bias) n.push_back(b + "attn.qkv.bias");
    for (const char* m : {"attn.proj.weight", "attn.proj.bias", "norm2.weight", "norm2.bias", "mlp.fc1.weight",
                          "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias"})
      n.push_back(b + m);
    if (a.qk_norm)
      for (const char* m : {"attn.q_norm.weight", "attn.q_norm.bias", "attn.k_norm.weight", "attn.k_norm.bias"})
        n.push_back(b + m);
    if (a.layer_scale) {
      n.push_back(b + "ls1.gamma");
      n.push_back(b + "ls2.gamma");
    }
  }
  const std::string final_norm = a.fc_norm ? "fc_norm." : "norm.";
  n.push_back(final_norm + "weight");
  n.push_back(final_norm + "bias");
  if (a.global_pool == GlobalPool::kMap) {
    n.push_back("attn_pool.latent");
    for (const char* m : {"q", "kv", "proj", "norm", "mlp.fc1", "mlp.fc2"}) {
      n.push_back(std::string("attn_pool.") + m + ".weight");
      n.push_back(std::string("attn_pool.") + m + ".bias");
    }
  }
  if (a.pooler) {
    n.push_back("pooler.dense.weight");
    n.push_back("pooler.dense.bias");
  }
  if (a.num_classes > 0) {
    n.push_back("head.weight");
    if (a.head_bias) n.push_back("head.bias");
    if (a.head_mean_tokens) n.push_back("head_mean.weight");
    if (a.dist_token) {
      n.push_back("head_dist.weight");
      n.push_back("head_dist.bias");
    }
  }
  return n;
}

std::vector<int64_t> expected_shape(const VitArch& a, const std::string& name) {
  const auto names = expected_names(a);
  if (std::find(names.begin(), names.end(), name) == names.end()) return {};
  const int64_t e = a.embed_dim, m = a.mlp_hidden();
  if (name == "patch_embed.proj.weight") return {e, a.in_chans, a.patch_size, a.patch_size};
  if (name == "cls_token" || name == "dist_token" || name == "attn_pool.latent") return {1, 1, e};
  if (name == "attn_pool.kv.weight") return {2 * e, e};
  if (name == "attn_pool.kv.bias") return {2 * e};
  if (name == "attn_pool.q.weight" || name == "attn_pool.proj.weight" || name == "pooler.dense.weight") return {e, e};
  if (name == "reg_token") return {1, a.reg_tokens, e};
  if (name == "pos_embed") return {1, a.pos_embed_len(), e};
  if (name == "head.weight" || name == "head_dist.weight" || name == "head_mean.weight") return {a.num_classes, e};
  if (name == "head.bias" || name == "head_dist.bias") return {a.num_classes};
  const size_t last_dot = name.rfind('.');
  const std::string module = name.substr(0, last_dot);
  const bool weight = name.compare(last_dot + 1, std::string::npos, "weight") == 0;
  const auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return module.size() >= s.size() && module.compare(module.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with("attn.q_norm") || ends_with("attn.k_norm")) return {int64_t{a.head_dim()}};
  if (ends_with("attn.qkv")) return weight ? std::vector<int64_t>{3 * e, e} : std::vector<int64_t>{3 * e};
  if (ends_with("attn.proj")) return weight ? std::vector<int64_t>{e, e} : std::vector<int64_t>{e};
  if (ends_with("mlp.fc1")) return weight ? std::vector<int64_t>{m, e} : std::vector<int64_t>{m};
  if (ends_with("mlp.fc2")) return weight ? std::vector<int64_t>{e, m} : std::vector<int64_t>{e};
  return {e};  // patch_embed.proj.bias and every LayerNorm parameter
}

Result<WeightSource> WeightSource::open(const std::string& path, WeightNaming naming) {
  EV_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
  WeightSource source(std::move(file));
  source.naming_ = naming;
  EV_RETURN_IF_ERROR(naming == WeightNaming::kHf ? source.build_hf() : source.build_timm());
  EV_RETURN_IF_ERROR(source.finish());
  source.add_folds();
  return source;
}

Status WeightSource::add(const std::string& canonical, size_t part, size_t num_parts, const TensorInfo& info) {
  Canonical& c = tensors_[canonical];
  if (c.parts.empty()) {
    c.parts.assign(num_parts, nullptr);
    c.part_names.assign(num_parts, "");
  }
  if (c.parts[part] != nullptr)
    return checkpoint_error(file_.path() + ": tensors '" + c.part_names[part] + "' and '" + info.name +
                            "' both map to '" + canonical + "'");
  c.parts[part] = &info;
  c.part_names[part] = info.name;
  return Status::Ok();
}



Status WeightSource::finish() {
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    Canonical& c = it->second;
    std::vector<std::string> present, absent;
    static const char* const kPartNames[] = {"q", "k", "v"};
    for (size_t i = 0; i < c.parts.size(); ++i)
      (c.parts[i] ? present : absent).push_back(c.parts.size() == 3 ? kPartNames[i] : "");
    std::string problem;
    if (!absent.empty()) {
      problem = it->first + ": checkpoint has the " + list_names(present, 3) + " part(s) but not " +
                list_names(absent, 3);
    } else {
      c.shape = c.parts[0]->shape;
      for (size_t i = 1; i < c.parts.size() && problem.empty(); ++i) {
        const auto& s = c.parts[i]->shape;
        if (s.empty() || c.shape.empty() || s.size() != c.shape.size() ||
            !std::equal(s.begin() + 1, s.end(), c.shape.begin() + 1))
          problem = it->first + ": parts " + c.part_names[0] + " " + shape_string(c.parts[0]->shape) + " and " +
                    c.part_names[i] + " " + shape_string(s) + " cannot be concatenated along dim 0";
        else
          c.shape[0] += s[0];
      }
      c.numel = 0;
      for (const TensorInfo* p : c.parts) c.numel += p->numel;
      // HF CLIP stores the class embedding as (E) and the position embedding as (L, E): timm's (1, 1, E) and
      // (1, L, E), the same bytes.
      if ((it->first == "cls_token" || it->first == "pos_embed") && !c.shape.empty() && c.shape.size() < 3 &&
          naming_ == WeightNaming::kHf)
        c.shape.insert(c.shape.begin(), 3 - c.shape.size(), 1);
    }
    if (!problem.empty()) {
      for (const std::string& n : c.part_names)
        if (!n.empty()) unmapped_.push_back(n);
      incomplete_.push_back(problem);
      it = tensors_.erase(it);
    } else {
      ++it;
    }
  }
  std::sort(unmapped_.begin(), unmapped_.end());
  return Status::Ok();
}

void WeightSource::add_folds() {
  const auto shape_of = [&](const std::string& name) -> const std::vector<int64_t>* {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second.shape;
  };
  // LayerScale: gamma (N) scales the rows of the projection before it (N, K) and its bias (N).
  for (const auto& [name, c] : tensors_) {
    int layer = 0;
    std::string rest;
    if (!starts_with(name, "blocks.") || !split_layer_index(name.substr(7), &layer, &rest)) continue;
    const char* target = rest == "ls1.gamma" ? "attn.proj" : rest == "ls2.gamma" ? "mlp.fc2" : nullptr;
    if (target == nullptr || c.shape.size() != 1) continue;
    for (const char* param : {".weight", ".bias"}) {
      const std::string t = "blocks." + std::to_string(layer) + "." + target + param;
      const std::vector<int64_t>* s = shape_of(t);
      if (s != nullptr && !s->empty() && (*s)[0] == c.shape[0]) derived_[t] = {FoldKind::kScaleRows, {t, name}, *s};
    }
  }
  // DeiT distilled: the two heads as one GEMM over the concatenated class and distillation tokens.
  const std::vector<int64_t>* hw = shape_of("head.weight");
  const std::vector<int64_t>* dw = shape_of("head_dist.weight");
  if (hw != nullptr && dw != nullptr && hw->size() == 2 && *hw == *dw)
    derived_["head_distilled.weight"] = {FoldKind::kHalfConcatCols, {"head.weight", "head_dist.weight"},
                                         {(*hw)[0], 2 * (*hw)[1]}};
  const std::vector<int64_t>* hb = shape_of("head.bias");
  const std::vector<int64_t>* db = shape_of("head_dist.bias");
  if (hb != nullptr && db != nullptr && *hb == *db)
    derived_["head_distilled.bias"] = {FoldKind::kHalfSum, {"head.bias", "head_dist.bias"}, *hb};
  // HF DINOv2 with registers: timm's no_embed_class form.
  const std::vector<int64_t>* cls = shape_of(kHfClsWithPos);
  const std::vector<int64_t>* pos = shape_of(kHfPosWithCls);
  if (cls != nullptr && pos != nullptr && cls->size() == 3 && pos->size() == 3 && (*pos)[1] > 1 &&
      (*cls)[2] == (*pos)[2]) {
    derived_["cls_token"] = {FoldKind::kAddFirstRow, {kHfClsWithPos, kHfPosWithCls}, *cls};
    derived_["pos_embed"] = {FoldKind::kDropFirstRow, {kHfPosWithCls}, {1, (*pos)[1] - 1, (*pos)[2]}};
  }
  // HF SigLIP's nn.MultiheadAttention packs q, k, v into in_proj: timm's q and kv are its row slices.
  const std::vector<int64_t>* ipw = shape_of("hf.attn_pool.in_proj.weight");
  const std::vector<int64_t>* ipb = shape_of("hf.attn_pool.in_proj.bias");
  if (ipw != nullptr && ipb != nullptr && ipw->size() == 2 && ipb->size() == 1 && (*ipw)[0] % 3 == 0 &&
      (*ipb)[0] == (*ipw)[0]) {
    const int64_t e = (*ipw)[0] / 3;
    derived_["attn_pool.q.weight"] = {FoldKind::kRowSlice, {"hf.attn_pool.in_proj.weight"}, {e, (*ipw)[1]}, 0};
    derived_["attn_pool.kv.weight"] = {FoldKind::kRowSlice, {"hf.attn_pool.in_proj.weight"}, {2 * e, (*ipw)[1]}, e};
    derived_["attn_pool.q.bias"] = {FoldKind::kRowSlice, {"hf.attn_pool.in_proj.bias"}, {e}, 0};
    derived_["attn_pool.kv.bias"] = {FoldKind::kRowSlice, {"hf.attn_pool.in_proj.bias"}, {2 * e}, e};
  }
  // HF Dinov2ForImageClassification: [class token, patch mean] (C, 2E) as two (C, E) GEMMs.
  const std::vector<int64_t>* cm = shape_of("hf.classifier_cls_mean.weight");
  if (cm != nullptr && cm->size() == 2 && (*cm)[1] % 2 == 0) {
    const int64_t half = (*cm)[1] / 2;
    derived_["head.weight"] = {FoldKind::kColSlice, {"hf.classifier_cls_mean.weight"}, {(*cm)[0], half}, 0};
    derived_["head_mean.weight"] = {FoldKind::kColSlice, {"hf.classifier_cls_mean.weight"}, {(*cm)[0], half}, half};
  }
  // The MAP head (timm AttentionPoolLatent): its query folded into one packed qkv GEMM.
  const std::vector<int64_t>* kvw = find_shape("attn_pool.kv.weight");
  const std::vector<int64_t>* kvb = find_shape("attn_pool.kv.bias");
  if (kvw != nullptr && kvb != nullptr && kvw->size() == 2 && kvb->size() == 1 && find_shape("attn_pool.latent") &&
      find_shape("attn_pool.q.weight") && find_shape("attn_pool.q.bias")) {
    const int64_t e = (*kvw)[0] / 2;
    derived_["attn_pool.qkv.weight"] = {FoldKind::kMapQkvWeight, {"attn_pool.kv.weight"}, {3 * e, (*kvw)[1]}};
    derived_["attn_pool.qkv.bias"] = {FoldKind::kMapQkvBias,
                                      {"attn_pool.latent", "attn_pool.q.weight", "attn_pool.q.bias",
                                       "attn_pool.kv.bias"},
                                      {3 * e}};
  }
}

const std::vector<int64_t>* WeightSource::find_shape(const std::string& name) const {
  auto d = derived_.find(name);
  if (d != derived_.end()) return &d->second.shape;
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second.shape;
}

void WeightSource::read_parts_f32(const Canonical& c, float* dst) const {
  for (const TensorInfo* part : c.parts) {
    convert_to_f32(*part, file_.data(*part), dst);
    dst += part->numel;
  }
}


std::vector<std::string> WeightSource::canonical_names() const {
  std::vector<std::string> names;
  for (const auto& kv : tensors_) names.push_back(kv.first);
  return names;
}

Result<std::vector<int64_t>> WeightSource::shape(const std::string& canonical) const {
  const std::vector<int64_t>* s = find_shape(canonical);
  if (s == nullptr) return not_found(file_.path() + ": tensor '" + canonical + "' is not in the checkpoint");
  return *s;
}

Status WeightSource::fit_pos_embed(const VitArch& arch) {
  const std::vector<int64_t>* s = find_shape("pos_embed");
  if (s == nullptr || s->size() != 3 || (*s)[0] != 1) return Status::Ok();  // check() reports it
  const std::vector<int64_t> have = *s;
  const int64_t prefix = arch.no_embed_class ? 0 : arch.num_prefix_tokens();
  const int64_t out_h = arch.grid_h(), out_w = arch.grid_w();
  const int64_t cells = have[1] - prefix;
  const bool timm = naming_ == WeightNaming::kTimm;
  // timm's checkpoint_filter_fn resamples when the lengths differ; HF's interpolate_pos_encoding unless the grid
  // is the checkpoint's own (transformers: the length agrees and the input is square).
  if (timm && cells == out_h * out_w) return Status::Ok();
  int64_t src_h = arch.pos_grid_h, src_w = arch.pos_grid_w;
  if (src_h <= 0) src_h = src_w = std::llround(std::sqrt(static_cast<double>(std::max<int64_t>(cells, 0))));
  const std::string target = std::to_string(out_h) + "x" + std::to_string(out_w);
  if (cells <= 0 || src_h * src_w != cells)
    return checkpoint_error(file_.path() + ": pos_embed " + shape_string(have) + " with " + std::to_string(prefix) +
                            " prefix row(s) does not hold a " +
                            (arch.pos_grid_h > 0 ? std::to_string(src_h) + "x" + std::to_string(src_w) +
                                                       " patch grid (architecture.pos_embed_grid)"
                                                 : std::string("square patch grid")) +
                            "; cannot resample it to " + target);
  if (src_h == out_h && src_w == out_w) return Status::Ok();
  if (src_h != src_w)
    return checkpoint_error(file_.path() + ": pos_embed holds a non-square " + std::to_string(src_h) + "x" +
                            std::to_string(src_w) + " patch grid (architecture.pos_embed_grid); transformers' "
                            "interpolate_pos_encoding resamples only square tables, so it cannot be resampled to " +
                            target + ": run the model at its checkpoint's size");
  const int64_t g = src_h;
  std::string source = "pos_embed";
  auto d = derived_.find("pos_embed");
  if (d != derived_.end()) {  // already a fold (HF DINOv2 with registers): resample its result
    source = "derived.pos_embed";
    derived_[source] = d->second;
  }
  Derived r{FoldKind::kResampleGrid, {source}, {1, prefix + out_h * out_w, have[2]}, prefix};
  r.grid[0] = g;
  r.grid[1] = g;
  r.grid[2] = out_h;
  r.grid[3] = out_w;
  // timm antialiases; of the HF families only Dinov2WithRegistersEmbeddings passes antialias=True.
  r.antialias = timm || arch.reg_tokens > 0;
  derived_["pos_embed"] = r;
  return Status::Ok();
}

Status WeightSource::check(const VitArch& arch) const {
  const std::vector<std::string> expected = expected_names(arch);
  const std::set<std::string> expected_set(expected.begin(), expected.end());
  std::vector<std::string> missing, extra, mismatched;
  for (const std::string& name : expected) {
    const std::vector<int64_t>* have = find_shape(name);
    if (have == nullptr) {
      missing.push_back(name);
      continue;
    }
    const std::vector<int64_t> want = expected_shape(arch, name);
    if (*have != want)
      mismatched.push_back(name + ": expected " + shape_string(want) + ", checkpoint has " + shape_string(*have));
  }
  for (const auto& kv : tensors_) {
    if (expected_set.count(kv.first)) continue;
    if (starts_with(kv.first, "hf.") && !derived_.empty()) continue;  // consumed by a fold  // consumed by the DINOv2-with-registers fold
    std::string label = kv.first;
    if (naming_ == WeightNaming::kHf) label += " (from " + list_names(kv.second.part_names, 3) + ")";
    extra.push_back(label);
  }
  for (const std::string& n : unmapped_) extra.push_back(n + " (no timm counterpart)");
  if (missing.empty() && extra.empty() && mismatched.empty() && incomplete_.empty()) return Status::Ok();

  std::string msg = file_.path() + ": checkpoint does not match the model";
  if (!missing.empty())
    msg += "; missing " + std::to_string(missing.size()) + " tensor(s): " + list_names(missing, kMaxListed);
  if (!extra.empty())
    msg += "; unexpected " + std::to_string(extra.size()) + " tensor(s): " + list_names(extra, kMaxListed);
  if (!mismatched.empty())
    msg += "; " + std::to_string(mismatched.size()) + " shape mismatch(es): " + list_names(mismatched, kMaxListed);
  if (!incomplete_.empty()) msg += "; " + list_names(incomplete_, kMaxListed);
  return checkpoint_error(msg);
}

Result<const WeightSource::Canonical*> WeightSource::lookup(const std::string& canonical, size_t count) const {
  auto it = tensors_.find(canonical);
  if (it == tensors_.end()) return not_found(file_.path() + ": tensor '" + canonical + "' is not in the checkpoint");
  if (static_cast<int64_t>(count) != it->second.numel)
    return invalid_argument(file_.path() + ": tensor '" + canonical + "' " + shape_string(it->second.shape) + " has " +
                            std::to_string(it->second.numel) + " elements, destination holds " +
                            std::to_string(count));
  return &it->second;
}

Status WeightSource::read_f32(const std::string& canonical, float* dst, size_t count) const {
  auto d = derived_.find(canonical);
  if (d != derived_.end()) return read_derived_f32(canonical, d->second, dst, count);
  EV_ASSIGN_OR_RETURN(const Canonical* c, lookup(canonical, count));
  read_parts_f32(*c, dst);
  return Status::Ok();
}

Status WeightSource::read_f16(const std::string& canonical, uint16_t* dst, size_t count) const {
  auto d = derived_.find(canonical);
  if (d != derived_.end()) {  // folded in fp32, rounded once (load time: the temporary is freed before infer)
    std::vector<float> f(count);
    EV_RETURN_IF_ERROR(read_derived_f32(canonical, d->second, f.data(), count));
    for (size_t i = 0; i < count; ++i) dst[i] = f32_to_f16(f[i]);
    return Status::Ok();
  }
  EV_ASSIGN_OR_RETURN(const Canonical* c, lookup(canonical, count));
  for (const TensorInfo* part : c->parts) {
    convert_to_f16(*part, file_.data(*part), dst);
    dst += part->numel;
  }
  return Status::Ok();
}

}  // namespace edgevit
