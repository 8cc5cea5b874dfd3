// Classifies one image with the installed edgevit C++ API: consumer_cpp MODEL.yaml IMAGE [DEVICE]
// Prints "prediction: <class> (<label>)"; exit status = edgevit::exit_code_for on an error.
#include <edgevit/edgevit.hpp>

#include <algorithm>
#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: consumer_cpp MODEL.yaml IMAGE [DEVICE]\n");
    return 2;
  }
  edgevit::EngineOptions options;
  options.plan.batch = 1;
  auto engine = edgevit::open_engine(argv[1], argc > 3 ? argv[3] : "auto", options);
  if (!engine.ok()) {
    std::fprintf(stderr, "consumer_cpp: %s\n", engine.status().to_string().c_str());
    return edgevit::exit_code_for(engine.status().code());
  }
  edgevit::Engine& e = **engine;
  edgevit::Status s = edgevit::load_image_file(argv[2], e.spec(), e.input_buffer());
  if (s.ok()) s = e.infer(e.input_buffer(), 1);
  if (!s.ok()) {
    std::fprintf(stderr, "consumer_cpp: %s\n", s.to_string().c_str());
    return edgevit::exit_code_for(s.code());
  }
  const float* logits = e.logits();
  const int best = static_cast<int>(std::max_element(logits, logits + e.output_dim()) - logits);
  std::printf("prediction: %d (edgevit %s, plan %s, arena %lld bytes)\n", best, edgevit::library_version(),
              e.plan().hash_hex().c_str(), static_cast<long long>(e.plan().arena_bytes));
  return 0;
}
