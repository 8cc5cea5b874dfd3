#include "runtime/executor.h"

namespace edgevit {

Result<std::vector<const OpRow*>> resolve_rows(const Plan& plan, std::vector<std::string>* notes) {
  std::vector<const OpRow*> rows;
  const DeviceKind kind = plan.device.kind;
  for (const Op& op : plan.graph.ops) {
    const OpRow* planned = find_row(kind, op.row);
    if (planned == nullptr)
      return internal_error("op '" + op.name + "': the plan names row '" + op.row + "', which the " +
                            to_string(kind) + " op table does not have");
    std::string why = planned->available();
    if (why.empty()) {
      rows.push_back(planned);
      continue;
    }
    // The next row of the table that serves the op and runs here.
    const OpRow* chosen = nullptr;
    bool after = false;
    for (const OpRow& row : op_table(kind)) {
      after = after || &row == planned;
      if (!after || &row == planned || !row_matches(row, op, plan.graph)) continue;
      if (row.scratch_bytes != planned->scratch_bytes) continue;  // the plan's arena has no room for another's
      if (!row.supports(op, plan.graph, plan.device).ok || !row.available().empty()) continue;
      chosen = &row;
      break;
    }
    if (chosen == nullptr)
      return unsupported("op '" + op.name + "': " + op.row + " cannot run here (" + why +
                         ") and no other row of the table serves it");
    if (notes != nullptr)
      notes->push_back("op '" + op.name + "': " + op.row + " unavailable here (" + why + "): " + chosen->name);
    rows.push_back(chosen);
  }
  return rows;
}

Status Executor::bind(const std::vector<const OpRow*>& rows) {
  const std::vector<Op>& ops = ctx_.plan.graph.ops;
  if (rows.size() != ops.size()) return internal_error("executor: one row per op expected");
  kernels_.clear();
  for (size_t i = 0; i < ops.size(); ++i) {
    std::unique_ptr<OpKernel> k = rows[i]->bind(ops[i]);
    if (k == nullptr) return unsupported("op '" + ops[i].name + "': row " + rows[i]->name + " cannot bind here");
    kernels_.push_back(std::move(k));
  }
  last_n_.assign(ops.size(), 0);
  return Status::Ok();
}

Status Executor::prepare() {
  for (auto& k : kernels_) EV_RETURN_IF_ERROR(k->prepare(ctx_));
  return Status::Ok();
}

Status Executor::walk(int n, bool profile) {
  EV_RETURN_IF_ERROR(hooks_.before_ops(n));
  for (size_t i = 0; i < kernels_.size(); ++i) {
    if (profile) EV_RETURN_IF_ERROR(hooks_.op_begin(i));
    EV_RETURN_IF_ERROR(kernels_[i]->run(ctx_, n));
    if (profile) EV_RETURN_IF_ERROR(hooks_.op_end(i));
    last_n_[i] = n;
  }
  return hooks_.after_ops(n);
}

Status Executor::capture(int n) {
  EV_RETURN_IF_ERROR(hooks_.begin_capture());
  const Status walked = walk(n, false);
  const Status ended = hooks_.end_capture(n);  // always ends a capture it began
  EV_RETURN_IF_ERROR(walked);
  return ended;
}

std::vector<std::string> Executor::executed() const {
  std::vector<std::string> names;
  for (size_t i = 0; i < kernels_.size(); ++i)
    names.push_back(last_n_[i] > 0 ? kernels_[i]->resolved(last_n_[i]) : std::string("(not run)"));
  return names;
}

std::vector<std::string> Executor::resolved(int n) const {
  std::vector<std::string> names;
  for (const auto& k : kernels_) names.push_back(k->resolved(n));
  return names;
}

std::vector<TuningRecord> Executor::tuning() const {
  std::vector<TuningRecord> all;
  for (const auto& k : kernels_)
    for (TuningRecord& r : k->tuning()) all.push_back(std::move(r));
  return all;
}

}  // namespace edgevit
