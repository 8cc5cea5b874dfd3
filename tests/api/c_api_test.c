/* The C API (api/edgevit.h) from plain C11, linked against libedgevit.so: classifies every digit image of
 * tests/data/digits with the embedded digits model and checks the error paths (missing and malformed
 * configs, unknown profile, bad arguments, unknown output names, buffers too small, output before infer).
 * Runs in ctest (label cpu) from the repository root, and under ASan/UBSan in tools/sanitize.sh.
 * Exit 0 = pass; every failed check prints one line and the exit status is 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/edgevit.h"

static int g_failures = 0;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "c_api_test:%d: FAIL: %s: ", __LINE__, #cond);  \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
      ++g_failures;                                                   \
    }                                                                 \
  } while (0)

static const char* kConfig = "config/models/vit-digits.yaml";

static int argmax(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

static void test_errors(void) {
  edgevit_engine* e = (edgevit_engine*)1;
  edgevit_status s = edgevit_engine_create("no/such/model.yaml", "host-cpu", NULL, &e);
  CHECK(s == EDGEVIT_NOT_FOUND, "missing config gave %s: %s", edgevit_status_name(s), edgevit_last_error());
  CHECK(e == NULL, "a failed create must set *out to NULL");
  CHECK(strstr(edgevit_last_error(), "no/such/model.yaml") != NULL, "message names the file: %s", edgevit_last_error());

  s = edgevit_engine_create("tests/data/digits/digit-3.png", "host-cpu", NULL, &e);
  CHECK(s == EDGEVIT_CONFIG_ERROR, "an image as config gave %s: %s", edgevit_status_name(s), edgevit_last_error());

  s = edgevit_engine_create(kConfig, "no-such-board", NULL, &e);
  CHECK(s == EDGEVIT_NOT_FOUND, "unknown profile gave %s: %s", edgevit_status_name(s), edgevit_last_error());
  CHECK(strstr(edgevit_last_error(), "no-such-board") != NULL, "message names the profile: %s", edgevit_last_error());

  s = edgevit_engine_create(NULL, "auto", NULL, &e);
  CHECK(s == EDGEVIT_INVALID_ARGUMENT, "NULL config gave %s", edgevit_status_name(s));
  s = edgevit_engine_create(kConfig, "auto", NULL, NULL);
  CHECK(s == EDGEVIT_INVALID_ARGUMENT, "NULL out gave %s", edgevit_status_name(s));

  edgevit_options bad;
  memset(&bad, 0, sizeof bad);
  bad.struct_size = sizeof bad;
  bad.max_batch = -1;
  s = edgevit_engine_create(kConfig, "host-cpu", &bad, &e);
  CHECK(s == EDGEVIT_INVALID_ARGUMENT, "max_batch -1 gave %s", edgevit_status_name(s));

  edgevit_engine_destroy(NULL);
  CHECK(edgevit_engine_input_buffer(NULL, NULL) == NULL, "input buffer of NULL");
  CHECK(strcmp(edgevit_status_name(EDGEVIT_CONFIG_ERROR), "config_error") == 0, "%s",
        edgevit_status_name(EDGEVIT_CONFIG_ERROR));
  CHECK(strcmp(edgevit_status_name((edgevit_status)77), "unknown") == 0, "%s", edgevit_status_name((edgevit_status)77));
}

static void test_classify(void) {
  edgevit_options opts;
  memset(&opts, 0, sizeof opts);
  opts.struct_size = sizeof opts;
  opts.max_batch = 10;
  opts.threads = 1;
  edgevit_engine* e = NULL;
  edgevit_status s = edgevit_engine_create(kConfig, "auto", &opts, &e);
  CHECK(s == EDGEVIT_OK, "create: %s: %s", edgevit_status_name(s), edgevit_last_error());
  if (s != EDGEVIT_OK) return;

  edgevit_plan_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  s = edgevit_engine_plan(e, &info);
  CHECK(s == EDGEVIT_OK, "plan: %s", edgevit_last_error());
  CHECK(info.max_batch == 10 && info.channels == 1 && info.height == 8 && info.width == 8,
        "plan shape %d x %d x %d x %d", info.max_batch, info.channels, info.height, info.width);
  CHECK(info.output_dim == 10 && info.embed_dim == 64, "output dims %d, %d", info.output_dim, info.embed_dim);
  CHECK(info.arena_bytes > 0 && info.total_bytes >= info.arena_bytes, "arena %lld total %lld",
        (long long)info.arena_bytes, (long long)info.total_bytes);
  CHECK(strlen(info.plan_hash_hex) == 16 && info.plan_hash != 0, "plan hash '%s'", info.plan_hash_hex);
  CHECK(strcmp(info.precision, "fp32") == 0, "precision %s", info.precision);
  edgevit_plan_info small_info;
  memset(&small_info, 0, sizeof small_info);
  small_info.struct_size = 8;
  CHECK(edgevit_engine_plan(e, &small_info) == EDGEVIT_INVALID_ARGUMENT, "struct_size 8 accepted");

  float logits[10 * 10];
  s = edgevit_engine_output(e, "logits", logits, 100, NULL, NULL);
  CHECK(s == EDGEVIT_INVALID_ARGUMENT, "output before any infer gave %s", edgevit_status_name(s));

  size_t numel = 0;
  float* in = edgevit_engine_input_buffer(e, &numel);
  CHECK(in != NULL && numel == 10 * 64, "input buffer %p, %zu floats", (void*)in, numel);
  char path[64];
  for (int d = 0; d < 10; ++d) {
    snprintf(path, sizeof path, "tests/data/digits/digit-%d.png", d);
    s = edgevit_engine_load_image(e, path, d);
    CHECK(s == EDGEVIT_OK, "load %s: %s", path, edgevit_last_error());
  }
  s = edgevit_engine_load_image(e, "tests/data/digits/digit-3.png", 10);
  CHECK(s == EDGEVIT_INVALID_ARGUMENT, "slot 10 of 10 gave %s", edgevit_status_name(s));
  s = edgevit_engine_load_image(e, "no/such.png", 0);
  CHECK(s != EDGEVIT_OK && strstr(edgevit_last_error(), "no/such.png") != NULL, "missing image: %s",
        edgevit_last_error());
  s = edgevit_engine_load_image(e, "tests/data/digits/digit-0.png", 0); /* restore slot 0 */
  CHECK(s == EDGEVIT_OK, "reload digit-0: %s", edgevit_last_error());

  s = edgevit_engine_infer(e, in, 11);
  CHECK(s == EDGEVIT_INVALID_ARGUMENT, "n = 11 > max_batch gave %s", edgevit_status_name(s));
  s = edgevit_engine_infer(e, in, 0);
  CHECK(s == EDGEVIT_INVALID_ARGUMENT, "n = 0 gave %s", edgevit_status_name(s));
  s = edgevit_engine_infer(e, NULL, 1);
  CHECK(s == EDGEVIT_INVALID_ARGUMENT, "NULL input gave %s", edgevit_status_name(s));

  s = edgevit_engine_infer(e, in, 10);
  CHECK(s == EDGEVIT_OK, "infer: %s: %s", edgevit_status_name(s), edgevit_last_error());
  int64_t rows = 0, cols = 0;
  s = edgevit_engine_output(e, "logits", logits, 100, &rows, &cols);
  CHECK(s == EDGEVIT_OK && rows == 10 && cols == 10, "logits: %s, %lld x %lld", edgevit_last_error(),
        (long long)rows, (long long)cols);
  /* The test images are the digits the model was not trained on; it gets 9 of these 10 right at least
   * (98.9% test accuracy, docs/digits.md); digit-3 and digit-7 are the README's and package.sh's. */
  int correct = 0;
  for (int d = 0; d < 10; ++d) correct += argmax(logits + d * 10, 10) == d;
  CHECK(correct >= 9, "%d of 10 digits right", correct);
  CHECK(argmax(logits + 3 * 10, 10) == 3, "digit-3 classified as %d", argmax(logits + 3 * 10, 10));
  CHECK(argmax(logits + 7 * 10, 10) == 7, "digit-7 classified as %d", argmax(logits + 7 * 10, 10));

  float* pre = (float*)malloc(sizeof(float) * 10 * 64);
  s = edgevit_engine_output(e, "pre_logits", pre, 10 * 64, &rows, &cols);
  CHECK(s == EDGEVIT_OK && rows == 10 && cols == 64, "pre_logits: %s", edgevit_last_error());
  s = edgevit_engine_output(e, "pre_logits", pre, 10, &rows, &cols);
  CHECK(s == EDGEVIT_BUFFER_TOO_SMALL && rows == 10 && cols == 64, "small buffer gave %s (%lld x %lld)",
        edgevit_status_name(s), (long long)rows, (long long)cols);
  s = edgevit_engine_output(e, "pre_logits", NULL, 0, &rows, &cols);
  CHECK(s == EDGEVIT_BUFFER_TOO_SMALL && rows * cols == 640, "size query gave %s", edgevit_status_name(s));
  free(pre);
  s = edgevit_engine_output(e, "embedding_of_nothing", logits, 100, NULL, NULL);
  CHECK(s == EDGEVIT_INVALID_ARGUMENT && strstr(edgevit_last_error(), "logits, embedding, pre_logits") != NULL,
        "unknown output gave %s: %s", edgevit_status_name(s), edgevit_last_error());

  /* A caller-owned input (a copy of image 3): same logits as from the input buffer. */
  float mine[64];
  memcpy(mine, in + 3 * 64, sizeof mine);
  float expected[10];
  memcpy(expected, logits + 3 * 10, sizeof expected);
  s = edgevit_engine_infer(e, mine, 1);
  CHECK(s == EDGEVIT_OK, "infer(caller buffer): %s", edgevit_last_error());
  s = edgevit_engine_output(e, "logits", logits, 100, &rows, &cols);
  CHECK(s == EDGEVIT_OK && rows == 1, "logits after n=1: rows %lld", (long long)rows);
  CHECK(memcmp(logits, expected, sizeof expected) == 0, "batch-1 logits differ from the batch-10 row");
  edgevit_engine_destroy(e);
}

/* The named outputs (docs/models.md "Outputs"): embedding and pre_logits by default, tokens only when
 * edgevit_options.tokens asks for them; a token-pooled model's pre_logits is the class token's row of its
 * tokens, and its embedding is pre_logits. */
static void test_named_outputs(void) {
  edgevit_engine* e = NULL;
  edgevit_status s = edgevit_engine_create(kConfig, "host-cpu", NULL, &e);
  CHECK(s == EDGEVIT_OK, "create: %s", edgevit_last_error());
  if (s != EDGEVIT_OK) return;
  int64_t dims[4] = {0, 0, 0, 0};
  int32_t ndim = 0;
  s = edgevit_engine_output_dims(e, "embedding", dims, 4, &ndim);
  CHECK(s == EDGEVIT_OK && ndim == 1 && dims[0] == 64, "embedding dims: %s (%d: %lld)", edgevit_last_error(), ndim,
        (long long)dims[0]);
  s = edgevit_engine_output_dims(e, "tokens", dims, 4, &ndim);
  CHECK(s == EDGEVIT_INVALID_ARGUMENT && strstr(edgevit_last_error(), "edgevit_options.tokens") != NULL,
        "tokens without asking gave %s: %s", edgevit_status_name(s), edgevit_last_error());
  edgevit_engine_destroy(e);

  edgevit_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.max_batch = 2;
  o.threads = 1;
  o.tokens = 1;
  s = edgevit_engine_create(kConfig, "host-cpu", &o, &e);
  CHECK(s == EDGEVIT_OK, "create with tokens: %s", edgevit_last_error());
  if (s != EDGEVIT_OK) return;
  s = edgevit_engine_output_dims(e, "tokens", dims, 1, &ndim);
  CHECK(s == EDGEVIT_BUFFER_TOO_SMALL && ndim == 2, "tokens dims into 1 slot gave %s", edgevit_status_name(s));
  s = edgevit_engine_output_dims(e, "tokens", dims, 4, &ndim);
  CHECK(s == EDGEVIT_OK && ndim == 2 && dims[1] == 64, "tokens dims: %s", edgevit_last_error());
  const int64_t tokens = dims[0];
  CHECK(tokens > 1, "%lld tokens", (long long)tokens);
  CHECK(edgevit_engine_load_image(e, "tests/data/digits/digit-3.png", 0) == EDGEVIT_OK, "load: %s", edgevit_last_error());
  CHECK(edgevit_engine_load_image(e, "tests/data/digits/digit-7.png", 1) == EDGEVIT_OK, "load: %s", edgevit_last_error());
  s = edgevit_engine_infer(e, edgevit_engine_input_buffer(e, NULL), 2);
  CHECK(s == EDGEVIT_OK, "infer: %s", edgevit_last_error());
  float* tok = (float*)malloc(sizeof(float) * (size_t)(2 * tokens * 64));
  float pre[2 * 64], emb[2 * 64];
  int64_t rows = 0, cols = 0;
  s = edgevit_engine_output(e, "tokens", tok, (size_t)(2 * tokens * 64), &rows, &cols);
  CHECK(s == EDGEVIT_OK && rows == 2 && cols == tokens * 64, "tokens: %s", edgevit_last_error());
  s = edgevit_engine_output(e, "pre_logits", pre, 2 * 64, &rows, &cols);
  CHECK(s == EDGEVIT_OK, "pre_logits: %s", edgevit_last_error());
  s = edgevit_engine_output(e, "embedding", emb, 2 * 64, &rows, &cols);
  CHECK(s == EDGEVIT_OK && rows == 2 && cols == 64, "embedding: %s", edgevit_last_error());
  for (int i = 0; i < 2; ++i) {
    CHECK(memcmp(pre + i * 64, tok + i * tokens * 64, 64 * sizeof(float)) == 0,
          "image %d: pre_logits is not the class token's row of tokens", i);
    CHECK(memcmp(emb + i * 64, pre + i * 64, 64 * sizeof(float)) == 0, "image %d: embedding != pre_logits", i);
  }
  free(tok);
  edgevit_engine_destroy(e);
}

/* A model whose input is not square (48 high, 32 wide): the plan's height and width, and an inference. */
static void test_non_square(void) {
  edgevit_engine* e = NULL;
  edgevit_status s = edgevit_engine_create("tests/data/families/resize/timm_vit_nohead.48x32.yaml", "host-cpu", NULL, &e);
  CHECK(s == EDGEVIT_OK, "create: %s: %s", edgevit_status_name(s), edgevit_last_error());
  if (s != EDGEVIT_OK) return;
  edgevit_plan_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  s = edgevit_engine_plan(e, &info);
  CHECK(s == EDGEVIT_OK, "plan: %s", edgevit_last_error());
  CHECK(info.channels == 3 && info.height == 48 && info.width == 32, "plan shape %d x %d x %d", info.channels,
        info.height, info.width);
  size_t numel = 0;
  float* in = edgevit_engine_input_buffer(e, &numel);
  CHECK(in != NULL && numel == (size_t)info.max_batch * 3 * 48 * 32, "input buffer of %zu floats", numel);
  if (in != NULL) {
    for (size_t i = 0; i < numel; ++i) in[i] = (float)(i % 7) * 0.25f - 0.75f;
    s = edgevit_engine_infer(e, in, 1);
    CHECK(s == EDGEVIT_OK, "infer: %s", edgevit_last_error());
  }
  edgevit_engine_destroy(e);
}

int main(void) {
  CHECK(edgevit_abi_version() == EDGEVIT_ABI_VERSION, "ABI %d, header %d", edgevit_abi_version(), EDGEVIT_ABI_VERSION);
  CHECK(strlen(edgevit_version()) > 0, "empty version");
  test_errors();
  test_classify();
  test_named_outputs();
  test_non_square();
  if (g_failures != 0) {
    fprintf(stderr, "c_api_test: %d check(s) failed\n", g_failures);
    return 1;
  }
  printf("c_api_test: all checks passed (edgevit %s)\n", edgevit_version());
  return 0;
}
