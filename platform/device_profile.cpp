#include "platform/device_profile.h"

namespace edgevit {

const char* to_string(DeviceKind k) { return k == DeviceKind::kCuda ? "cuda" : "cpu"; }

}  // namespace edgevit
