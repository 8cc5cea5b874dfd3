// edgevitd: the health and stats answers (docs/protocol.md, Health and stats).
#include <nlohmann/json.hpp>

#include "serving/json_text.h"
#include "serving/server_impl.h"

namespace edgevit::daemon {

std::string Server::health_json() const {
  const Impl& I = *impl_;
  const std::shared_ptr<Model> m = I.current_model();
  nlohmann::ordered_json j;
  j["status"] = I.stopping ? "stopping" : (!m || !m->engine) ? "fault" : I.fault ? "degraded" : "ready";
  // Names and paths come from files: valid_utf8 (json_text.h) so that dump() has nothing to refuse.
  j["model"] = valid_utf8(m ? m->spec.name : "");
  j["model_config"] = valid_utf8(m ? m->spec.source_path : "");
  j["device"] = valid_utf8(m ? m->device.name : "");
  j["plan_hash"] = m ? m->plan_hash : "";
  j["generation"] = m ? m->generation : 0;
  j["batch"] = m ? m->batch : 0;
  j["uptime_s"] = std::chrono::duration<double>(Clock::now() - I.started).count();
  // The daemon's memory statement: the plan's total plus the decode budget (docs/daemon.md).
  const DecodeBudget::Stats d = I.decode_budget->stats();
  const int64_t plan_bytes = m ? m->total_bytes : 0;
  j["memory"] = {{"plan_bytes", plan_bytes},
                 {"decode_budget_bytes", d.capacity},
                 {"bound_bytes", plan_bytes + d.capacity}};
  {
    std::lock_guard<std::mutex> lock(I.reload_info_mu);
    j["last_reload"] = {{"result", I.last_reload_result},
                        {"message", valid_utf8(I.last_reload_message)},
                        {"time_unix_ms", I.last_reload_unix_ms}};
  }
  return dump_json(j);
}

std::string Server::stats_json() const {
  const Impl& I = *impl_;
  nlohmann::ordered_json j;
  j["requests_ok"] = I.requests_ok.load();
  j["images_ok"] = I.images_ok.load();
  j["batches"] = I.batches.load();
  j["mean_batch_images"] = I.batches ? static_cast<double>(I.images_ok.load()) / I.batches.load() : 0.0;
  nlohmann::ordered_json errs = nlohmann::ordered_json::object();
  for (int c = 1; c <= static_cast<int>(protocol::kLastErrorCode); ++c)
    errs[protocol::error_code_name(static_cast<ErrorCode>(c))] = I.errors[c].load();
  j["errors"] = errs;
  j["connections"] = {{"accepted", I.accepted.load()},
                      {"active", I.active_connections.load()},
                      {"rejected_peers", I.rejected_peers.load()},
                      {"no_slot", I.no_slot.load()},
                      {"evicted_idle", I.evicted.load()}};
  j["handler_exceptions"] = I.handler_exceptions.load();
  j["latency_us"] = {{"p50", I.latency.quantile_us(0.5)}, {"p99", I.latency.quantile_us(0.99)}};
  j["infer_us"] = {{"p50", I.infer_latency.quantile_us(0.5)}, {"p99", I.infer_latency.quantile_us(0.99)}};
  j["reloads"] = {{"ok", I.reloads_ok.load()}, {"failed", I.reloads_failed.load()}};
  const DecodeBudget::Stats d = I.decode_budget->stats();
  j["decode"] = {{"budget_bytes", d.capacity}, {"in_use_bytes", d.in_use}, {"peak_bytes", d.peak},
                 {"granted", d.granted},       {"waited", d.waited},      {"timed_out", d.timed_out},
                 {"waiting", d.waiting}};
  j["gpio"] = I.gpio ? nlohmann::ordered_json::parse(I.gpio->stats_json(), nullptr, false) : nlohmann::ordered_json();
  return dump_json(j);
}

std::string Server::Impl::version_json() const {
  return dump_json(nlohmann::ordered_json{{"daemon", kVersion}, {"protocol", protocol::kProtocolVersion}});
}

}  // namespace edgevit::daemon
