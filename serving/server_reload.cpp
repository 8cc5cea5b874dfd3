// edgevitd: SIGHUP reload (docs/daemon.md, Signals): beside the old model, or drain-and-replace with rollback.
// Every failure path goes through finish_reload(): health `degraded`, the fault LED, READY=1.
#include <systemd/sd-daemon.h>

#include <exception>
#include <thread>

#include <spdlog/spdlog.h>

#include "serving/server_impl.h"

namespace edgevit::daemon {

namespace {

// Abandoned or stopping: a reload still running must not install its model.
Status abandoned_status() { return Status(StatusCode::kInternal, "reload abandoned (deadline passed or stopping)"); }

}  // namespace

// Records the outcome (health's last_reload, stats' reloads, the fault flag behind `degraded` and the LED)
// and tells systemd the daemon is ready again. An abandoned reload was recorded when it was abandoned.
Status Server::Impl::finish_reload(const Status& s, const std::string& result) {
  if (reload_abandoned) return s.ok() ? abandoned_status() : s;
  record_reload(result, s.ok() ? "" : s.to_string());
  if (s.ok()) {
    ++reloads_ok;
    fault = false;
  } else {
    ++reloads_failed;
    fault = true;
    const std::shared_ptr<Model> m = current_model();
    spdlog::error("reload failed ({}), serving {}: {}", result, m ? m->spec.name : "nothing", s.to_string());
  }
  sd_notify(0, s.ok() ? "READY=1\nSTATUS=serving" : "READY=1\nSTATUS=serving (last reload failed)");
  return s;
}

void Server::abandon_reload(const std::string& why) {
  Impl& I = *impl_;
  if (I.reload_abandoned.exchange(true)) return;
  I.record_reload("failed", why);
  ++I.reloads_failed;
  I.fault = true;
  spdlog::error("reload abandoned, the current model keeps serving: {}", why);
  sd_notify(0, "READY=1\nSTATUS=serving (last reload abandoned)");
}

Status Server::reload() {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> rl(I.reload_mu);
  if (I.stopping) return abandoned_status();
  I.reload_abandoned = false;
  I.notify_reloading();
  DaemonConfig cfg = I.config;
  if (I.options.reload_config) {
    auto r = I.options.reload_config();
    if (!r.ok()) return I.finish_reload(r.status(), "failed");
    cfg = std::move(*r);
  }
  return I.reload_guarded(cfg);
}

Status Server::reload_with(const DaemonConfig& cfg) {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> rl(I.reload_mu);
  if (I.stopping) return abandoned_status();
  I.reload_abandoned = false;
  I.notify_reloading();
  return I.reload_guarded(cfg);
}

// reload_locked with no exception escaping (an allocation failure while loading a model): it is a failed
// reload like any other, and the old model serves on.
Status Server::Impl::reload_guarded(const DaemonConfig& cfg) {
  try {
    return reload_locked(cfg);
  } catch (const std::exception& e) {
    ++handler_exceptions;
    return finish_reload(internal_error(std::string("reload: ") + e.what()), "failed");
  }
}

void Server::Impl::notify_reloading() {
  const uint64_t mono = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch()).count());
  sd_notify(0, fmt::format("RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading", mono).c_str());
  spdlog::info("reload requested");
}

// The reload proper, with reload_mu held: spec, labels and plan of the new model, then beside or drain.
Status Server::Impl::reload_locked(const DaemonConfig& cfg) {
  if (options.test_reload_delay_ms > 0) {
    spdlog::warn("test: the reload sleeps {} ms (EDGEVITD_TEST_RELOAD_DELAY_MS)", options.test_reload_delay_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(options.test_reload_delay_ms));
  }
  Status v = validate_daemon_config(cfg);
  if (!v.ok()) return finish_reload(v, "failed");
  const std::string path = cfg.model.empty() ? options.default_model_path : cfg.model;
  const std::shared_ptr<Model> old = current_model();
  auto fresh = load_model(path, cfg, false);  // spec, labels, plan: no arena yet
  if (!fresh.ok()) return finish_reload(fresh.status(), "failed");
  std::shared_ptr<Model> m = std::move(*fresh);
  if (m->batch > static_cast<int>(batch_slots.size()))
    return finish_reload(invalid_argument(path + ": batch " + std::to_string(m->batch) +
                                          " above the batch edgevitd started with (" +
                                          std::to_string(batch_slots.size()) + "); restart to grow it"),
                         "failed");
  const bool beside = old && old->engine && old->total_bytes + m->total_bytes <= m->budget_bytes;
  std::string outcome = "ok";
  const Status s = beside ? swap_beside(m, cfg) : replace_draining(old, m, cfg, &outcome);
  if (!s.ok()) return finish_reload(s, beside ? "failed" : outcome);
  if (reload_abandoned) return abandoned_status();
  {
    std::lock_guard<std::mutex> lock(model_mu);
    config.model = cfg.model;
    config.device = cfg.device;
    config.max_batch = cfg.max_batch;
    config.default_topk = cfg.default_topk;
  }
  spdlog::info("reloaded: serving {} ({}), plan {}, {}", m->spec.name, path, m->plan_hash,
               beside ? "loaded beside the old model" : "old model freed first (both did not fit the budget)");
  return finish_reload(Status::Ok(), "ok");
}

// Loads next to the old model, then hands it to the worker: the swap happens between two batches.
Status Server::Impl::swap_beside(const std::shared_ptr<Model>& m, const DaemonConfig& cfg) {
  EV_RETURN_IF_ERROR(build_engine(m.get(), cfg, ModelCheck::kWhileServing));
  std::unique_lock<std::mutex> lock(q_mu);
  if (reload_abandoned || worker_stop) return abandoned_status();
  m->generation = next_generation++;
  pending_swap = m;
  q_cv.notify_all();
  swap_cv.wait(lock, [&] { return !pending_swap || worker_done; });
  return pending_swap ? abandoned_status() : Status::Ok();
}

// build_engine on the worker thread, whose loop must survive it: an exception is a failed build.
Status Server::Impl::guarded_build(Model* m, const DaemonConfig& cfg, ModelCheck check) {
  try {
    return build_engine(m, cfg, check);
  } catch (const std::exception& e) {
    ++handler_exceptions;
    return internal_error(std::string("building the engine: ") + e.what());
  }
}

// Both do not fit: the worker drains (finishes its batch), frees the old arena, builds the new model and
// falls back to the old one if that fails. Requests wait in the queue meanwhile.
Status Server::Impl::replace_draining(const std::shared_ptr<Model>& old, const std::shared_ptr<Model>& m,
                                      const DaemonConfig& cfg, std::string* outcome) {
  Status result;
  bool done = false;
  std::unique_lock<std::mutex> lock(q_mu);
  if (reload_abandoned || worker_stop) return abandoned_status();
  pending_replace = [&]() {
    if (reload_abandoned) {
      result = abandoned_status();
    } else {
      std::unique_ptr<Engine> old_engine = old ? std::move(old->engine) : nullptr;
      old_engine.reset();  // free the old arena first
      Status s = guarded_build(m.get(), cfg, ModelCheck::kWhileServing);
      std::lock_guard<std::mutex> ml(model_mu);
      if (s.ok()) {
        m->generation = next_generation++;
        model = m;
      } else {
        result = s;
        *outcome = "rolled_back";
        if (old) {
          const Status back = guarded_build(old.get(), config, ModelCheck::kNone);
          if (!back.ok()) {
            *outcome = "failed";
            result = Status(s.code(), s.message() + "; rollback also failed: " + back.message());
            old->engine.reset();
          }
        }
      }
    }
    std::lock_guard<std::mutex> ql(q_mu);
    done = true;
  };
  q_cv.notify_all();
  swap_cv.wait(lock, [&] { return done || worker_done; });
  if (!done) {
    pending_replace = nullptr;  // the worker stopped before it ran the task
    return abandoned_status();
  }
  return result;
}

}  // namespace edgevit::daemon
