#include "runtime/op_table.h"


namespace edgevit {

const std::vector<OpRow>& op_table(DeviceKind kind) {
  return kind == DeviceKind::kCpu ? cpu_op_table() : cuda_op_table();
}

bool row_matches(const OpRow& row, const Op& op, const Graph& graph) {
  if (row.kind != op.kind || row.precision != op_precision(op, graph)) return false;
  return !row.int8_twin || graph.precision == Precision::kInt8;
}

RowChoice choose_row(const Op& op, const Graph& graph, const DeviceProfile& device) {
  RowChoice c;
  std::string rejected;
  for (const OpRow& row : op_table(device.kind)) {
    if (!row_matches(row, op, graph)) continue;
    const Support s = row.supports(op, graph, device);
    if (!s.ok) {
      rejected += std::string(rejected.empty() ? "" : "; ") + row.name + " not used: " + s.reason;
      c.fallback = c.fallback || !s.by_request;
      continue;
    }
    c.row = &row;
    c.kernel = s.kernel.empty() ? row.name : s.kernel;
    c.reason = rejected.empty() ? s.reason : s.reason + " (" + rejected + ")";
    return c;
  }
  c.fallback = false;
  c.reason = rejected.empty() ? std::string("no row of the ") + to_string(device.kind) + " table implements " +
                                    to_string(op.kind) + " at " + to_string(op_precision(op, graph))
                              : rejected;
  return c;
}

const OpRow* find_row(DeviceKind kind, const std::string& name) {
  for (const OpRow& row : op_table(kind))
    if (name == row.name) return &row;
  return nullptr;
}

std::vector<const OpRow*> available_rows(DeviceKind kind) {
  std::vector<const OpRow*> rows;
  for (const OpRow& row : op_table(kind))
    if (row.available().empty()) rows.push_back(&row);
  return rows;
}

}  // namespace edgevit
