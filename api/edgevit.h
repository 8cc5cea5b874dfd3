/* edgevit C API: a stable ABI over the C++ Engine for programs in C and other languages (installed as
 * <edgevit/edgevit.h>; link -ledgevit, or find_package(edgevit CONFIG) / pkg-config edgevit).
 *
 *   edgevit_engine* e = NULL;
 *   if (edgevit_engine_create("vit-digits.yaml", "auto", NULL, &e) != EDGEVIT_OK) {
 *     fprintf(stderr, "%s\n", edgevit_last_error()); return 1;
 *   }
 *   edgevit_engine_load_image(e, "digit-3.png", 0);     // decoded into the engine's input buffer, image 0
 *   edgevit_engine_infer(e, edgevit_engine_input_buffer(e, NULL), 1);
 *   float logits[10];
 *   edgevit_engine_output(e, "logits", logits, 10, NULL, NULL);
 *   edgevit_engine_destroy(e);
 *
 * ABI rules: handles are opaque; every function returns an edgevit_status (or a value that cannot fail)
 * and never lets a C++ exception out; structs the library fills start with `struct_size`, which the caller
 * sets to sizeof(the struct it was compiled with), so fields can be added at the end without breaking
 * callers. Buffers passed in are the caller's: the library reads or fills them during the call and keeps
 * no pointer to them. The library's own buffers (input buffer, error strings) are valid as stated below.
 *
 * Thread safety: distinct engines may be used from distinct threads at the same time. One engine must not
 * be used by two threads at once (the caller serializes: infer writes the engine's outputs in place).
 * edgevit_last_error() is per thread.
 */
#ifndef EDGEVIT_EDGEVIT_H_
#define EDGEVIT_EDGEVIT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define EDGEVIT_API __attribute__((visibility("default")))
#else
#define EDGEVIT_API
#endif

/* Version of this header's ABI; edgevit_abi_version() returns the library's. Same major = compatible. */
#define EDGEVIT_ABI_VERSION 1

/* Status codes. The values are fixed (they mirror edgevit::StatusCode and docs/exit-codes.md's order). */
typedef enum edgevit_status {
  EDGEVIT_OK = 0,
  EDGEVIT_INVALID_ARGUMENT = 1, /* bad argument: null pointer, unknown output name, n out of range */
  EDGEVIT_NOT_FOUND = 2,        /* a file or device profile that must exist does not */
  EDGEVIT_IO_ERROR = 3,
  EDGEVIT_CONFIG_ERROR = 4,     /* model config / device profile YAML */
  EDGEVIT_CHECKPOINT_ERROR = 5, /* safetensors weights */
  EDGEVIT_INPUT_ERROR = 6,      /* image or input tensor */
  EDGEVIT_UNSUPPORTED = 7,      /* valid request this build or device cannot serve */
  EDGEVIT_DOES_NOT_FIT = 8,     /* the plan does not fit the device's memory budget */
  EDGEVIT_DEVICE_ERROR = 9,     /* CUDA / driver failure */
  EDGEVIT_CHECK_FAILED = 10,
  EDGEVIT_NON_FINITE = 11,      /* the forward produced NaN/Inf: no answer */
  EDGEVIT_INTERNAL = 12,        /* a bug in edgevit (or out of memory outside the arena) */
  EDGEVIT_BUFFER_TOO_SMALL = 100 /* the caller's buffer is smaller than the result (sizes are reported) */
} edgevit_status;

typedef struct edgevit_engine edgevit_engine; /* opaque */

/* Options for edgevit_engine_create; NULL means all defaults. Zero-initialize, then set struct_size. */
typedef struct edgevit_options {
  uint32_t struct_size; /* sizeof(edgevit_options) */
  int32_t max_batch;    /* images per infer the plan is made for; 0 = the config's runtime.max_batch */
  int32_t threads;      /* CPU threads; 0 = every available core */
  int32_t tokens;       /* nonzero: also produce the "tokens" output (n, tokens, embed); sized only then */
} edgevit_options;

/* The plan's numbers (edgevit plan prints the same). */
typedef struct edgevit_plan_info {
  uint32_t struct_size;  /* set by the caller to sizeof(edgevit_plan_info) */
  int64_t arena_bytes;   /* the engine's one arena allocation */
  int64_t total_bytes;   /* everything counted against the device budget (arena, staging, context...) */
  int64_t budget_bytes;  /* the device profile's memory budget */
  int64_t weights_bytes;
  int32_t max_batch;
  int32_t channels, height, width; /* input image: (max_batch, channels, height, width) float32 */
  int32_t output_dim;    /* "logits" columns: num_classes (or embed_dim for a model without a head) */
  int32_t embed_dim;     /* "pre_logits" columns */
  uint64_t plan_hash;
  char plan_hash_hex[17];   /* 16 lowercase hex digits + NUL */
  char device[64];          /* device profile name, e.g. "host-cpu", "orin-nx-16gb" (truncated, NUL-ended) */
  char precision[8];        /* "fp32" | "fp16" */
  char attention_kernel[64];
} edgevit_plan_info;

EDGEVIT_API int edgevit_abi_version(void);
EDGEVIT_API const char* edgevit_version(void);                  /* "0.1.0"; static storage */
EDGEVIT_API const char* edgevit_status_name(edgevit_status s);  /* "config_error"...; static storage */

/* Message of the last failing call on this thread ("" if none): names the file, key, tensor or argument.
 * Valid until the next edgevit call on this thread. */
EDGEVIT_API const char* edgevit_last_error(void);

/* Loads `config_path` (a model YAML), resolves `device` ("auto" or NULL: detect; else a profile name such
 * as "host-cpu" or a profile YAML path), plans, allocates the arena and loads the weights. On success
 * *out is a new engine the caller destroys with edgevit_engine_destroy; on failure *out is NULL. */
EDGEVIT_API edgevit_status edgevit_engine_create(const char* config_path, const char* device,
                                                 const edgevit_options* options, edgevit_engine** out);
EDGEVIT_API void edgevit_engine_destroy(edgevit_engine* engine); /* NULL is a no-op */

EDGEVIT_API edgevit_status edgevit_engine_plan(const edgevit_engine* engine, edgevit_plan_info* info);

/* The engine's own input buffer, (max_batch, C, H, W) float32, already normalized images; *numel (if not
 * NULL) receives its element count. Valid for the engine's lifetime. Write images there and call
 * edgevit_engine_infer(engine, edgevit_engine_input_buffer(engine, NULL), n): no copy. NULL if engine is. */
EDGEVIT_API float* edgevit_engine_input_buffer(edgevit_engine* engine, size_t* numel);

/* Decodes an image file (PNG, JPEG, PPM/PGM, BMP...) with the model's preprocessing into image slot
 * `index` (0 <= index < max_batch) of the input buffer. */
EDGEVIT_API edgevit_status edgevit_engine_load_image(edgevit_engine* engine, const char* path, int32_t index);

/* Runs the model on the first n images of `input` ((n, C, H, W) float32; any memory, or the input buffer).
 * 1 <= n <= max_batch. EDGEVIT_NON_FINITE when any output is NaN/Inf. */
EDGEVIT_API edgevit_status edgevit_engine_infer(edgevit_engine* engine, const float* input, int32_t n);

/* Copies output `name` of the last successful infer into the caller's `dst` of `capacity` floats, row-major
 * (*rows, *cols) = (n, values per image); rows/cols may be NULL. Names (docs/models.md "Outputs"), each
 * when the engine produces it (edgevit_engine_output_dims tells): "logits" (n, classes: models with a
 * classifier head; a model without one answers "logits" with its pre_logits, as ABI 1 did), "embedding"
 * (n, dim: the pooled feature), "pre_logits" (n, embed_dim), "tokens" (n, tokens * embed_dim: the
 * final-normed tokens, token-major; only with edgevit_options.tokens). A name the engine does not produce
 * is EDGEVIT_INVALID_ARGUMENT (the message lists those it does); no infer yet is EDGEVIT_INVALID_ARGUMENT;
 * capacity < rows*cols is EDGEVIT_BUFFER_TOO_SMALL with *rows and *cols set (dst may then be NULL). */
EDGEVIT_API edgevit_status edgevit_engine_output(const edgevit_engine* engine, const char* name, float* dst,
                                                 size_t capacity, int64_t* rows, int64_t* cols);

/* The per-image dimensions of output `name` ("tokens": {tokens, embed_dim}; the others one dimension) into
 * dims[0 .. *ndim), at most `capacity` of them (EDGEVIT_BUFFER_TOO_SMALL with *ndim set when more). Needs no
 * infer. A name the engine does not produce is EDGEVIT_INVALID_ARGUMENT. */
EDGEVIT_API edgevit_status edgevit_engine_output_dims(const edgevit_engine* engine, const char* name, int64_t* dims,
                                                      int32_t capacity, int32_t* ndim);

#ifdef __cplusplus
}
#endif

#endif /* EDGEVIT_EDGEVIT_H_ */
