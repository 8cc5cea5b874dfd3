#include "platform/capabilities.h"

namespace edgevit {

namespace {

constexpr int kMmaMinCc = 80;   // mma.sync m16n8k16 with fp32 accumulate, ldmatrix, cp.async
constexpr int kFp16MinCc = 53;  // native half arithmetic

std::string sm_name(const DeviceProfile& p) { return "SM" + std::to_string(p.compute_capability); }

}  // namespace

std::string format_compute_capability(int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

Decision supports_tensor_core_mma(const DeviceProfile& p) {
  if (p.kind != DeviceKind::kCuda) {
    return {false, "no: device '" + p.name + "' is kind cpu (mma.sync m16n8k16 needs a CUDA GPU of SM80+)"};
  }
  if (p.compute_capability < kMmaMinCc) {
    return {false, "no: compute capability " + format_compute_capability(p.compute_capability) + " < " +
                       format_compute_capability(kMmaMinCc) + " (mma.sync m16n8k16 needs SM80+)"};
  }
  return {true, "yes: " + sm_name(p) + " has mma.sync m16n8k16 (fp16 in, fp32 accumulate), ldmatrix and cp.async"};
}

Decision supports_fp16(const DeviceProfile& p) {
  if (p.kind != DeviceKind::kCuda) {
    return {false, "no: device '" + p.name + "' is kind cpu; the CPU backend computes in fp32"};
  }
  if (p.compute_capability < kFp16MinCc) {
    return {false, "no: compute capability " + format_compute_capability(p.compute_capability) + " < " +
                       format_compute_capability(kFp16MinCc) + " (native fp16 arithmetic needs SM53+)"};
  }
  return {true, "yes: " + sm_name(p) + " has native fp16 arithmetic (compute capability " +
                    format_compute_capability(p.compute_capability) + " >= 5.3)"};
}

int64_t max_smem_per_block(const DeviceProfile& p) {
  if (p.kind != DeviceKind::kCuda) return 0;
  return p.smem_per_block_optin_bytes > 0 ? p.smem_per_block_optin_bytes : p.smem_per_block_bytes;
}

}  // namespace edgevit
