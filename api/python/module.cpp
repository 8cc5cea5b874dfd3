// The `edgevit` Python module: Engine over open_engine (api/edgevit.hpp), NumPy in and out.
//
//   import edgevit, numpy as np
//   e = edgevit.Engine("config/models/vit-digits.yaml", device="auto")
//   e.plan                        # dict: arena_bytes, total_bytes, max_batch, input_shape, plan_hash, ...
//   out = e.run_image("digit-3.png")   # {"logits": (1, 10), "embedding": (1, 64), "pre_logits": (1, 64)} float32
//   edgevit.Engine(cfg, tokens=True).infer(x)["tokens"]           # (N, tokens, embed): the final-normed tokens
//   e.load_image("a.png", 0); e.load_image("b.png", 1); e.infer(e.input_buffer[:2])   # a batch
//   out = e.infer(x)              # x: (N, C, H, W) float32, N <= max_batch
//   e.input_buffer[:n] = ...; e.infer(e.input_buffer[:n])   # no copy at all
//
// Copies: a float32 C-contiguous x is read in place (the engine copies it into its input buffer, as the
// C++ infer(ptr, n) does); a slice of e.input_buffer is not copied at all; any other array (another
// dtype, strides) is converted once, by NumPy, straight into the input buffer (under the engine's lock). Outputs are new arrays
// (copies of the engine's, so they stay valid after the next call). The GIL is released while the engine
// runs; one engine serves one call at a time (a per-engine mutex), several engines run in parallel.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "api/edgevit.hpp"

namespace py = pybind11;
namespace ev = edgevit;

namespace {

// Raised for every edgevit error; args[0] is "<code name>: <message>" (e.g. "config_error: x.yaml:3:5: ...").
PyObject* g_error = nullptr;

[[noreturn]] void raise(const ev::Status& s) {
  PyErr_SetString(g_error, s.to_string().c_str());
  throw py::error_already_set();
}

class PyEngine {
 public:
  PyEngine(const std::string& config, const std::string& device, int max_batch, int threads, bool tokens) {
    ev::EngineOptions options;
    options.plan.batch = max_batch;
    options.threads = threads;
    options.plan.tokens = tokens;
    ev::Result<std::unique_ptr<ev::Engine>> engine = [&] {
      py::gil_scoped_release release;
      return ev::open_engine(config, device, options);
    }();
    if (!engine.ok()) raise(engine.status());
    engine_ = std::move(engine).value();
    if (!engine_->spec().labels_path.empty()) {
      auto labels = ev::load_labels(engine_->spec().labels_path, engine_->spec().arch.num_classes);
      if (!labels.ok()) raise(labels.status());
      labels_ = std::move(*labels);
    }
  }

  py::dict plan() const {
    const ev::Plan& p = engine_->plan();
    const ev::VitArch& a = engine_->spec().arch;
    py::dict d;
    d["model"] = p.model_name;
    d["device"] = p.device.name;
    d["precision"] = ev::to_string(p.graph.precision);
    d["arena_bytes"] = p.arena_bytes;
    d["weights_bytes"] = p.weights_bytes;
    d["total_bytes"] = p.total_bytes;
    d["budget_bytes"] = p.budget_bytes;
    d["fits"] = p.fits;
    d["max_batch"] = engine_->max_batch();
    d["input_shape"] = py::make_tuple(engine_->max_batch(), a.in_chans, a.img_h, a.img_w);
    py::dict outputs;  // per-image dimensions of each output the engine produces
    for (ev::OutputKind k : engine_->outputs().kinds())
      outputs[ev::to_string(k)] = py::tuple(py::cast(engine_->output_dims(k)));
    d["output_dims"] = outputs;
    d["plan_hash"] = p.hash_hex();
    d["attention_kernel"] = p.attention_kernel;
    return d;
  }

  // (max_batch, C, H, W) float32 view of the engine's input buffer; it keeps the engine alive.
  py::array input_buffer(py::object self) {
    const ev::VitArch& a = engine_->spec().arch;
    return py::array_t<float>({static_cast<py::ssize_t>(engine_->max_batch()), static_cast<py::ssize_t>(a.in_chans),
                               static_cast<py::ssize_t>(a.img_h), static_cast<py::ssize_t>(a.img_w)},
                              engine_->input_buffer(), self);
  }

  py::dict infer(py::array x) {
    const ev::VitArch& a = engine_->spec().arch;
    if (x.ndim() != 4 || x.shape(1) != a.in_chans || x.shape(2) != a.img_h || x.shape(3) != a.img_w) {
      std::string shape;
      for (py::ssize_t i = 0; i < x.ndim(); ++i) shape += (i ? ", " : "") + std::to_string(x.shape(i));
      raise(ev::invalid_argument("infer: input has shape (" + shape + "); this model takes (N, " +
                                 std::to_string(a.in_chans) + ", " + std::to_string(a.img_h) + ", " +
                                 std::to_string(a.img_w) + ") float32"));
    }
    const py::ssize_t n = x.shape(0);
    if (n < 1 || n > engine_->max_batch()) {
      raise(ev::invalid_argument("infer: " + std::to_string(n) + " images; the plan takes 1.." +
                                 std::to_string(engine_->max_batch()) + " (Engine(..., max_batch=N))"));
    }
    const bool f32_c = x.dtype().is(py::dtype::of<float>()) &&
                       (x.flags() & py::array::c_style) == py::array::c_style;
    if (f32_c) return run(static_cast<const float*>(x.data()), static_cast<int>(n), nullptr, {});
    // One conversion by NumPy, straight into the engine's input buffer, under the engine's lock (taken
    // with the GIL held: whoever holds the lock never waits for the GIL, see run()).
    std::unique_lock<std::mutex> lock(mutex_);
    py::array dst = py::array_t<float>({n, x.shape(1), x.shape(2), x.shape(3)}, engine_->input_buffer(), py::none());
    py::module_::import("numpy").attr("copyto")(dst, x, py::arg("casting") = "same_kind");
    return run(engine_->input_buffer(), static_cast<int>(n), nullptr, std::move(lock));
  }

  py::dict run_image(const std::string& path) { return run(nullptr, 1, &path, {}); }

  // Decodes an image file into slot `index` of the input buffer (for batches: load each, then infer once).
  void load_image(const std::string& path, int index) {
    if (index < 0 || index >= engine_->max_batch()) {
      raise(ev::invalid_argument("load_image: index " + std::to_string(index) + " is outside the input buffer's 0.." +
                                 std::to_string(engine_->max_batch() - 1)));
    }
    ev::Status status;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      status = ev::load_image_file(path, engine_->spec(),
                                   engine_->input_buffer() + int64_t{index} * engine_->input_numel_per_image());
    }
    if (!status.ok()) raise(status);
  }

  const std::vector<std::string>& labels() const { return labels_; }

 private:
  // Runs n images from `input`, or decodes `*image` into the input buffer first; returns the outputs.
  // Called with the GIL; `held` is the engine's lock when the caller already took it. The lock is taken
  // and released while the GIL is released, so a thread holding the lock never waits for the GIL.
  py::dict run(const float* input, int n, const std::string* image, std::unique_lock<std::mutex> held) {
    std::vector<ev::OutputKind> kinds = engine_->outputs().kinds();
    std::vector<py::array_t<float>> arrays;
    std::vector<float*> dsts;
    for (ev::OutputKind k : kinds) {
      std::vector<py::ssize_t> shape{n};
      for (int64_t d : engine_->output_dims(k)) shape.push_back(static_cast<py::ssize_t>(d));
      arrays.emplace_back(shape);
      dsts.push_back(arrays.back().mutable_data());
    }
    ev::Status status;
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> lock = held.owns_lock() ? std::move(held) : std::unique_lock<std::mutex>(mutex_);
      if (image != nullptr) {
        status = ev::load_image_file(*image, engine_->spec(), engine_->input_buffer());
        input = engine_->input_buffer();
      }
      if (status.ok()) status = engine_->infer(input, n);
      if (status.ok()) {
        for (size_t i = 0; i < kinds.size(); ++i)
          std::memcpy(dsts[i], engine_->output(kinds[i]),
                      sizeof(float) * n * engine_->output_numel_per_image(kinds[i]));
      }
    }
    if (!status.ok()) raise(status);
    py::dict out;
    for (size_t i = 0; i < kinds.size(); ++i) out[ev::to_string(kinds[i])] = std::move(arrays[i]);
    return out;
  }

  std::unique_ptr<ev::Engine> engine_;
  std::vector<std::string> labels_;
  std::mutex mutex_;
};

}  // namespace

PYBIND11_MODULE(edgevit, m) {
  m.doc() = "edgevit: static-allocation Vision Transformer runtime (README.md, section Python)";
  m.attr("__version__") = ev::library_version();
  g_error = PyErr_NewException("edgevit.Error", PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::handle(g_error);
  py::class_<PyEngine>(m, "Engine")
      .def(py::init<const std::string&, const std::string&, int, int, bool>(), py::arg("config"),
           py::arg("device") = "auto", py::arg("max_batch") = 0, py::arg("threads") = 0, py::arg("tokens") = false,
           "Loads a model config (YAML), plans it for `device` ('auto' or a profile name) and loads the weights. "
           "max_batch=0: the config's runtime.max_batch; threads=0: every core; tokens=True: also the 'tokens' "
           "output (N, tokens, embed), which is sized only then.")
      .def_property_readonly("plan", &PyEngine::plan, "the plan's numbers (dict)")
      .def_property_readonly("input_buffer",
                             [](py::object self) { return self.cast<PyEngine&>().input_buffer(self); },
                             "(max_batch, C, H, W) float32 view of the engine's input buffer")
      .def_property_readonly("labels", &PyEngine::labels, "class labels from the config's labels file (or [])")
      .def("infer", &PyEngine::infer, py::arg("x"),
           "x: (N, C, H, W) array, normalized. Returns every output the engine produces by name (docs/models.md "
           "'Outputs'): 'logits' (N, classes; models with a classifier head), 'embedding' (N, dim), 'pre_logits' "
           "(N, embed), 'tokens' (N, tokens, embed; with tokens=True).")
      .def("run_image", &PyEngine::run_image, py::arg("path"),
           "Decodes and preprocesses an image file into slot 0 of the input buffer, runs it; same outputs as "
           "infer() with N = 1.")
      .def("load_image", &PyEngine::load_image, py::arg("path"), py::arg("index") = 0,
           "Decodes and preprocesses an image file into slot `index` of the input buffer (no inference).");
}
