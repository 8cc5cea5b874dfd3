// `edgevit client`: sends files to a running edgevitd (serving/edgevit_client.h) and prints the
// answers. Daemon error codes map to edgevit's exit codes (docs/protocol.md: "Client exit codes").
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"
#include "serving/protocol.h"

namespace edgevit::daemon {

struct ClientOptions {
  std::string socket_path = "/run/edgevit/edgevitd.sock";
  std::vector<std::string> inputs;  // images (sent encoded) or safetensors files with tensor `input`
  std::string query;                // "health" | "stats" | "version" instead of inputs
  int topk = 5;
  bool json = false;                // one JSON object per line and request
  bool logits = false;              // ask for and print the logits
  bool embedding = false;           // ask for the embedding; prints its L2 norm and first values per image
  bool tokens = false;              // ask for the tokens (the model config must list them in runtime.outputs)
  int timeout_ms = 30000;
};

// Status code for a daemon error code (kInputError for bad_image/bad_shape/too_large, kIoError for
// transport failures, busy, timeout, shutting_down and permission_denied, kNonFinite for
// non_finite_output, kUnsupported for no_such_output, kInternal otherwise).
StatusCode status_for_daemon_error(uint32_t code);

// Runs every request in order on one connection, printing each answer to `out`. Stops at the first
// failure and returns it; an answer holding a non-finite score or logit is such a failure (kNonFinite),
// never printed.
Status run_client(const ClientOptions& options, std::ostream& out);

}  // namespace edgevit::daemon
