// edgevitd_bench: latency and throughput of single-image tensor requests through the Unix socket versus
// Engine::infer in-process, same model, same device profile, same threads (docs/benchmarks.md, daemon).
//
//   build/bin/edgevitd_bench --model config/models/vit-digits.yaml --device host-cpu --requests 5000 --clients 1
//
// The daemon runs in this process (serving/server.h) on a temporary socket; clients use
// serving/edgevit_client.h, exactly as an application would.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "platform/device_registry.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "serving/edgevit_client.h"
#include "serving/server.h"

namespace ev = edgevit;
using Clock = std::chrono::steady_clock;

namespace {

double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

// Batch-1 Engine::infer latencies in us (after `warmup` calls), or empty when the engine fails.
std::vector<double> in_process_latencies(const ev::ModelSpec& spec, const ev::DeviceProfile& dev, int threads,
                                         const std::vector<float>& input, int warmup, int requests) {
  ev::EngineOptions eo;
  eo.plan.batch = 1;
  eo.threads = threads;
  auto engine = ev::Engine::create(spec, dev, eo);
  if (!engine.ok()) return {};
  std::vector<double> local;
  for (int i = 0; i < warmup + requests; ++i) {
    const auto t0 = Clock::now();
    if (!(*engine)->infer(input.data(), 1).ok()) return {};
    if (i >= warmup) local.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return local;
}

// Each client's tensor-request latencies in us through the socket at `path`; failed clients count in *failures.
std::vector<std::vector<double>> socket_latencies(const std::string& path, const ev::VitArch& a, int clients,
                                                  const std::vector<float>& input, int warmup, int requests,
                                                  std::atomic<int>* failures) {
  const uint32_t dims[3] = {static_cast<uint32_t>(a.in_chans), static_cast<uint32_t>(a.img_h),
                            static_cast<uint32_t>(a.img_w)};
  std::vector<std::vector<double>> lat(clients);
  std::vector<std::thread> ts;
  for (int c = 0; c < clients; ++c) {
    ts.emplace_back([&, c] {
      ev::client::Connection conn;
      ev::client::Error err;
      ev::client::InferAnswer ans;
      if (!conn.connect(path, &err)) { ++*failures; return; }
      for (int i = 0; i < warmup + requests; ++i) {
        const auto t0 = Clock::now();
        if (!conn.infer_tensor(input.data(), dims, 3, 5, false, &ans, &err)) { ++*failures; return; }
        if (i >= warmup) lat[c].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
    });
  }
  for (auto& t : ts) t.join();
  return lat;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"edgevitd_bench: socket vs in-process latency"};
  std::string model = EDGEVIT_BENCH_DEFAULT_MODEL, device = "host-cpu", devices_dir = EDGEVIT_BENCH_DEVICES_DIR;
  int requests = 5000, clients = 1, threads = 1, max_wait_us = 500, warmup = 200;
  app.add_option("--model", model);
  app.add_option("--device", device);
  app.add_option("--devices-dir", devices_dir);
  app.add_option("--requests", requests, "per client");
  app.add_option("--clients", clients);
  app.add_option("--threads", threads, "engine CPU threads");
  app.add_option("--max-wait-us", max_wait_us, "dynamic batching wait");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  auto spec = ev::load_model_spec(model);
  auto dev = ev::find_device_profile(device, {devices_dir});
  if (!spec.ok() || !dev.ok()) {
    std::fprintf(stderr, "edgevitd_bench: %s\n", (!spec.ok() ? spec.status() : dev.status()).to_string().c_str());
    return 1;
  }
  const ev::VitArch& a = spec->arch;
  std::vector<float> input(static_cast<size_t>(a.in_chans) * a.img_h * a.img_w);
  uint32_t s = 7;
  for (float& v : input) { s = s * 1664525u + 1013904223u; v = static_cast<float>(s >> 8) / 8388608.0f - 1.0f; }

  const std::vector<double> local = in_process_latencies(*spec, *dev, threads, input, warmup, requests);
  if (local.empty()) return 1;

  ev::daemon::ServerOptions so;
  so.config.model = model;
  so.config.device = device;
  so.config.threads = threads;
  so.config.max_wait_us = max_wait_us;
  so.config.socket_path = "/tmp/edgevitd_bench." + std::to_string(getpid()) + ".sock";
  so.device_dirs = {devices_dir};
  auto server = ev::daemon::Server::start(so);
  if (!server.ok()) {
    std::fprintf(stderr, "edgevitd_bench: %s\n", server.status().to_string().c_str());
    return 1;
  }
  std::atomic<int> failures{0};
  const auto t_start = Clock::now();
  const auto lat = socket_latencies(so.config.socket_path, a, clients, input, warmup, requests, &failures);
  const double wall = std::chrono::duration<double>(Clock::now() - t_start).count();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::fprintf(stderr, "daemon stats: %s\n", (*server)->stats_json().c_str());
  (*server)->stop();
  if (failures > 0 || all.empty()) {
    std::fprintf(stderr, "edgevitd_bench: %d client failures\n", failures.load());
    return 1;
  }
  std::printf("| path | clients | requests | p50 us | p99 us | requests/s |\n|---|---|---|---|---|---|\n");
  std::printf("| in-process Engine::infer (batch 1) | 1 | %zu | %.1f | %.1f | %.0f |\n", local.size(), pct(local, 0.5),
              pct(local, 0.99), 1e6 / (std::accumulate(local.begin(), local.end(), 0.0) / local.size()));
  std::printf("| edgevitd socket, tensor request | %d | %zu | %.1f | %.1f | %.0f |\n", clients, all.size(), pct(all, 0.5),
              pct(all, 0.99), (static_cast<double>(clients) * (warmup + requests)) / wall);
  std::printf("added p50 latency: %.1f us\n", pct(all, 0.5) - pct(local, 0.5));
  return 0;
}
