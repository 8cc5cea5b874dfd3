/* Classifies one image with the installed edgevit C API: consumer_c MODEL.yaml IMAGE [DEVICE]
 * Prints "prediction: <class>"; exit status 1 on an error (the message from edgevit_last_error). */
#include <edgevit/edgevit.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: consumer_c MODEL.yaml IMAGE [DEVICE]\n");
    return 2;
  }
  edgevit_options options = {sizeof(edgevit_options), 1, 0};
  edgevit_engine* engine = NULL;
  if (edgevit_engine_create(argv[1], argc > 3 ? argv[3] : "auto", &options, &engine) != EDGEVIT_OK ||
      edgevit_engine_load_image(engine, argv[2], 0) != EDGEVIT_OK ||
      edgevit_engine_infer(engine, edgevit_engine_input_buffer(engine, NULL), 1) != EDGEVIT_OK) {
    fprintf(stderr, "consumer_c: %s\n", edgevit_last_error());
    edgevit_engine_destroy(engine);
    return 1;
  }
  float logits[1000];
  int64_t cols = 0;
  if (edgevit_engine_output(engine, "logits", logits, 1000, NULL, &cols) != EDGEVIT_OK) {
    fprintf(stderr, "consumer_c: %s\n", edgevit_last_error());
    edgevit_engine_destroy(engine);
    return 1;
  }
  int best = 0;
  for (int i = 1; i < cols; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  printf("prediction: %d (edgevit %s, C ABI %d)\n", best, edgevit_version(), edgevit_abi_version());
  edgevit_engine_destroy(engine);
  return 0;
}
