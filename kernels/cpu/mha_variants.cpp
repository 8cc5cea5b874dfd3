// choose_mha: filters the rows of kMhaVariants (kernels/mha_variants.h) and says why. No CUDA here: the
// planner calls it for device profiles on CPU-only hosts.
#include "kernels/mha_variants.h"

#include <set>
#include <sstream>

namespace edgevit {
namespace {

// Why `row` cannot serve the request, or "" if it can.
std::string reject_reason(const MhaVariant& row, int sm, int64_t smem_budget, const MhaGrid* grid) {
  std::ostringstream why;
  if (row.max_seq_q > 0 && grid == nullptr) {
    why << "query count unknown (row serves <= " << row.max_seq_q << " query rows)";
    return why.str();
  }
  if (row.max_seq_q > 0 && grid->seq_q > row.max_seq_q) {
    why << "seq_q " << grid->seq_q << " > " << row.max_seq_q;
    return why.str();
  }
  const bool windowed = row.min_blocks_per_sm > 0 || row.max_blocks_per_sm > 0;
  if (windowed && (grid == nullptr || grid->sm_count <= 0)) {
    why << "grid size unknown (row serves ";
    if (row.min_blocks_per_sm > 0) why << ">= " << row.min_blocks_per_sm;
    if (row.min_blocks_per_sm > 0 && row.max_blocks_per_sm > 0) why << " and ";
    if (row.max_blocks_per_sm > 0) why << "< " << row.max_blocks_per_sm;
    why << " blocks/SM)";
    return why.str();
  }
  if (windowed) {
    const double per_sm = mha_blocks_per_sm(row, *grid);
    why.precision(3);
    if (row.min_blocks_per_sm > 0 && per_sm < row.min_blocks_per_sm) {
      why << per_sm << " blocks/SM < " << row.min_blocks_per_sm;
      return why.str();
    }
    if (row.max_blocks_per_sm > 0 && per_sm >= row.max_blocks_per_sm) {
      why << per_sm << " blocks/SM >= " << row.max_blocks_per_sm;
      return why.str();
    }
  }
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

double mha_blocks_per_sm(const MhaVariant& row, const MhaGrid& grid) {
  if (grid.sm_count <= 0) return 0.0;
  const int64_t q_tiles = (static_cast<int64_t>(grid.seq_q) + row.q_tile - 1) / row.q_tile;
  return static_cast<double>(int64_t{grid.batch} * grid.heads * q_tiles) / grid.sm_count;
}

std::vector<const MhaVariant*> mha_eligible_rows(int sm, int64_t smem_optin_bytes, int head_dim) {
  const int64_t budget = smem_optin_bytes > kMhaDefaultSmemBytes ? smem_optin_bytes : kMhaDefaultSmemBytes;
  std::vector<const MhaVariant*> rows;
  for (const MhaVariant& row : kMhaVariants) {
    if (row.head_dim != head_dim || row.dtype != MhaDtype::kF16 || sm < row.min_sm) continue;
    if ((row.max_sm != 0 && sm > row.max_sm) || row.smem_bytes > budget) continue;
    rows.push_back(&row);
  }
  return rows;
}

MhaChoice choose_mha(int sm, int64_t smem_optin_bytes, int head_dim, bool fp16, bool force_unfused,
                     const MhaGrid* grid) {
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
    const std::string why = reject_reason(row, sm, budget, grid);
    if (why.empty()) {
      choice.fused = true;
      choice.variant = &row;
      std::ostringstream msg;
      msg << "fused MHA: yes: " << row.name << " (sm " << sm << ", smem " << row.smem_bytes << " B of "
          << budget << " B, " << row.threads << " threads, q_tile " << row.q_tile;
      if (grid != nullptr && grid->sm_count > 0) {
        msg.precision(3);
        msg << ", " << mha_blocks_per_sm(row, *grid) << " blocks/SM on " << grid->sm_count << " SMs";
      }
      msg << ")";
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
