#include "base/status.h"

namespace edgevit {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kIoError: return "io_error";
    case StatusCode::kConfigError: return "config_error";
    case StatusCode::kCheckpointError: return "checkpoint_error";
    case StatusCode::kInputError: return "input_error";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kDoesNotFit: return "does_not_fit";
    case StatusCode::kDeviceError: return "device_error";
    case StatusCode::kCheckFailed: return "check_failed";
    case StatusCode::kNonFinite: return "non_finite_output";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

// Keep in sync with docs/exit-codes.md. 1 is "a check failed" (self-test convention), 2 is reserved for
// command-line usage errors (CLI11 uses it too).
int exit_code_for(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 0;
    case StatusCode::kCheckFailed: return 1;
    case StatusCode::kInvalidArgument: return 2;
    case StatusCode::kConfigError: return 3;
    case StatusCode::kCheckpointError: return 4;
    case StatusCode::kInputError: return 5;
    case StatusCode::kDoesNotFit: return 6;
    case StatusCode::kUnsupported: return 7;
    case StatusCode::kNotFound: return 8;
    case StatusCode::kIoError: return 9;
    case StatusCode::kDeviceError: return 10;
    case StatusCode::kNonFinite: return 11;
    case StatusCode::kInternal: return 70;
  }
  return 70;
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(code_, prefix + ": " + message_);
}

}  // namespace edgevit
