// Status values for every fallible call in edgevit (TFLite Micro / TensorRT habit: errors are values).
// Library code never calls exit()/abort() and never prints-and-continues; it returns a Status whose
// message names the file, key or tensor. The command-line tools map StatusCode to documented exit codes
// (exit_code_for, docs/exit-codes.md).
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace edgevit {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // bad flag / argument value given by the caller
  kNotFound,         // a file, profile, tensor or key that must exist does not
  kIoError,          // read/write/mmap failure on a file that exists
  kConfigError,      // YAML model/device/daemon config: syntax, unknown key, type, range
  kCheckpointError,  // safetensors: malformed header, bad offsets, missing/extra tensors, shapes
  kInputError,       // image or input tensor: undecodable, wrong shape, too large
  kUnsupported,      // valid request this build/device cannot serve (e.g. fp16 on host-cpu)
  kDoesNotFit,       // the plan does not fit the device's memory budget
  kDeviceError,      // CUDA / driver / GPIO failure at run time
  kCheckFailed,      // a self-test or numerical check failed
  kNonFinite,        // the forward produced a NaN or Inf output: never reported as an answer
  kInternal,         // a bug: an invariant that should hold did not
};

// Stable name of a code, e.g. "config_error" (used in JSON output and logs).
const char* status_code_name(StatusCode code);

// Documented process exit code for a status (docs/exit-codes.md). kOk -> 0.
int exit_code_for(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "config_error: model.yaml:3:5: key 'architecture.depth': expected a positive integer"
  std::string to_string() const;

  // Returns a copy whose message is "<prefix>: <message>" (adds context while propagating).
  Status with_context(const std::string& prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status config_error(std::string m) { return {StatusCode::kConfigError, std::move(m)}; }
inline Status checkpoint_error(std::string m) { return {StatusCode::kCheckpointError, std::move(m)}; }
inline Status input_error(std::string m) { return {StatusCode::kInputError, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status does_not_fit(std::string m) { return {StatusCode::kDoesNotFit, std::move(m)}; }
inline Status device_error(std::string m) { return {StatusCode::kDeviceError, std::move(m)}; }
inline Status check_failed(std::string m) { return {StatusCode::kCheckFailed, std::move(m)}; }
inline Status non_finite(std::string m) { return {StatusCode::kNonFinite, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or an error. Accessing value() of an error is a bug (asserted).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace edgevit

#define EV_CONCAT_INNER(a, b) a##b
#define EV_CONCAT(a, b) EV_CONCAT_INNER(a, b)

// Propagate a non-OK Status.
#define EV_RETURN_IF_ERROR(expr)                       \
  do {                                                 \
    ::edgevit::Status ev_status_ = (expr);             \
    if (!ev_status_.ok()) return ev_status_;           \
  } while (0)

// `EV_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result<T> or returns its error.
#define EV_ASSIGN_OR_RETURN(lhs, expr) EV_ASSIGN_OR_RETURN_IMPL(EV_CONCAT(ev_result_, __LINE__), lhs, expr)
#define EV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
