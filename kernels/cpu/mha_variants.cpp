// choose_mha: filters the rows of kMhaVariants (kernels/mha_variants.h) and says why. No CUDA here: the
// planner calls it for device profiles on CPU-only hosts.
#include "kernels/mha_variants.h"

#include <set>
#include <sstream>

namespace edgevit {
namespace {

// Why `row` cannot serve the request, or "" if it can.
std::string reject_reason(const MhaVariant& row, int sm, int64_t smem_budget) {
  std::ostringstream why;
  if (sm < row.min_sm) {
    why << "sm " << sm << " < min_sm " << row.min_sm;
  } else if (row.max_sm != 0 && sm > row.max_sm) {
    why << "sm " << sm << " > max_sm " << row.max_sm;
  } else if (row.smem_bytes > smem_budget) {
    why << "smem " << row.smem_bytes << " B > " << smem_budget << " B available";
  }
  return why.str();
}

}  // namespace

MhaChoice choose_mha(int sm, int64_t smem_optin_bytes, int head_dim, bool fp16, bool force_unfused) {
  const char* kFallback = "; using unfused cuBLAS + softmax";
  MhaChoice choice;
  if (force_unfused) {
    choice.reason = std::string("fused MHA: no: unfused requested by configuration") + kFallback;
    return choice;
  }
  if (!fp16) {
    choice.reason = std::string("fused MHA: no: activations are not fp16 (fused kernels are fp16 only)") +
                    kFallback;
    return choice;
  }
  std::set<int> dims;
  for (const MhaVariant& row : kMhaVariants) dims.insert(row.head_dim);
  if (dims.count(head_dim) == 0) {
    std::ostringstream msg;
    msg << "fused MHA: no: head_dim " << head_dim << " not in {";
    const char* sep = "";
    for (int d : dims) {
      msg << sep << d;
      sep = ",";
    }
    msg << "}" << kFallback;
    choice.reason = msg.str();
    return choice;
  }
  const int64_t budget = smem_optin_bytes > kMhaDefaultSmemBytes ? smem_optin_bytes : kMhaDefaultSmemBytes;
  std::ostringstream skipped;
  for (const MhaVariant& row : kMhaVariants) {
    if (row.head_dim != head_dim || row.dtype != MhaDtype::kF16) continue;
    const std::string why = reject_reason(row, sm, budget);
    if (why.empty()) {
      choice.fused = true;
      choice.variant = &row;
      std::ostringstream msg;
      msg << "fused MHA: yes: " << row.name << " (sm " << sm << ", smem " << row.smem_bytes << " B of "
          << budget << " B, " << row.threads << " threads, q_tile " << row.q_tile << ")";
      if (!skipped.str().empty()) msg << "; skipped " << skipped.str();
      choice.reason = msg.str();
      return choice;
    }
    skipped << (skipped.str().empty() ? "" : ", ") << row.name << ": " << why;
  }
  choice.reason = "fused MHA: no: " + skipped.str() + kFallback;
  return choice;
}

}  // namespace edgevit
