#include "serving/daemon_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/yaml_guard.h"

namespace edgevit::daemon {

namespace fs = std::filesystem;

namespace {

const std::vector<std::pair<const char*, LogFormat>> kLogFormats = {{"text", LogFormat::kText},
                                                                     {"json", LogFormat::kJson}};
const std::vector<std::pair<const char*, TriggerEdge>> kEdges = {
    {"rising", TriggerEdge::kRising}, {"falling", TriggerEdge::kFalling}, {"both", TriggerEdge::kBoth}};
const std::vector<const char*> kLogLevels = {"trace", "debug", "info", "warn", "error", "critical", "off"};

constexpr int kMaxGpioOffset = 1 << 16;

std::string resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty()) return p;
  const fs::path q(p);
  if (q.is_absolute() || base_dir.empty()) return q.lexically_normal().string();
  return (fs::path(base_dir) / q).lexically_normal().string();
}

// A list of plain non-negative integers (uids, gids, class indices), read as numbers and checked integral.
Status get_id_list(ConfigMap& m, const std::string& key, double hi, std::vector<uint32_t>* out) {
  std::vector<double> v;
  EV_RETURN_IF_ERROR(m.get_double_list(key, false, 0, hi, false, &v));
  out->clear();
  for (double d : v) {
    if (d != std::floor(d)) return m.error(key, "expected integers, got " + std::to_string(d));
    out->push_back(static_cast<uint32_t>(d));
  }
  return Status::Ok();
}

Status read_line(ConfigMap& parent, const std::string& key, GpioLineConfig* line, ConfigMap* out) {
  EV_RETURN_IF_ERROR(parent.get_map(key, false, out));
  if (!parent.has(key)) return Status::Ok();
  EV_RETURN_IF_ERROR(out->get_int("offset", true, 0, kMaxGpioOffset, &line->offset));
  EV_RETURN_IF_ERROR(out->get_bool("active_low", false, &line->active_low));
  return Status::Ok();
}

Status read_gpio(ConfigMap& top, const std::string& base_dir, GpioConfig* g) {
  ConfigMap m;
  EV_RETURN_IF_ERROR(top.get_map("gpio", false, &m));
  if (!top.has("gpio")) return Status::Ok();
  g->enabled = true;
  EV_RETURN_IF_ERROR(m.get_bool("enabled", false, &g->enabled));
  EV_RETURN_IF_ERROR(m.get_string("chip", true, &g->chip));

  ConfigMap led;
  EV_RETURN_IF_ERROR(read_line(m, "status_led", &g->status_led, &led));
  if (m.has("status_led")) EV_RETURN_IF_ERROR(led.finish());

  ConfigMap trig;
  EV_RETURN_IF_ERROR(read_line(m, "trigger", &g->trigger, &trig));
  if (m.has("trigger")) {
    EV_RETURN_IF_ERROR(trig.get_enum("edge", false, kEdges, &g->trigger_edge));
    EV_RETURN_IF_ERROR(trig.get_int("debounce_ms", false, 0, 60000, &g->debounce_ms));
    EV_RETURN_IF_ERROR(trig.get_string("spool_dir", true, &g->spool_dir));
    g->spool_dir = resolve(base_dir, g->spool_dir);
    EV_RETURN_IF_ERROR(trig.finish());
  }

  ConfigMap act;
  EV_RETURN_IF_ERROR(read_line(m, "actuator", &g->actuator, &act));
  if (m.has("actuator")) {
    EV_RETURN_IF_ERROR(act.get_int("pulse_ms", false, 1, 600000, &g->pulse_ms));
    std::vector<uint32_t> classes;
    EV_RETURN_IF_ERROR(get_id_list(act, "alarm_classes", 1 << 20, &classes));
    g->alarm_classes.assign(classes.begin(), classes.end());
    EV_RETURN_IF_ERROR(act.get_double("threshold", false, 0, 1, &g->alarm_threshold));
    EV_RETURN_IF_ERROR(act.finish());
    if (g->alarm_classes.empty()) return act.error("alarm_classes", "an actuator needs at least one alarm class");
  }
  return m.finish();
}

Status parse_mode(ConfigMap& m, const std::string& key, uint32_t* out) {
  std::string s;
  EV_RETURN_IF_ERROR(m.get_string(key, false, &s));
  if (!m.has(key)) return Status::Ok();
  if (s.size() < 3 || s.size() > 4 || s.find_first_not_of("01234567") != std::string::npos)
    return m.error(key, "expected an octal file mode such as 0660, got '" + s + "'");
  *out = static_cast<uint32_t>(std::stoul(s, nullptr, 8));
  if ((*out & 0600) != 0600) return m.error(key, "the owner (the daemon) needs read and write (0600)");
  return Status::Ok();
}

}  // namespace

Result<DaemonConfig> parse_daemon_config(const std::string& yaml_text, const std::string& display_name,
                                         const std::string& base_dir) {
  EV_ASSIGN_OR_RETURN(YAML::Node root, parse_yaml_mapping(yaml_text, display_name));
  DaemonConfig c;
  ConfigMap top(root, display_name, "");
  EV_RETURN_IF_ERROR(top.get_string("model", false, &c.model));
  c.model = resolve(base_dir, c.model);
  EV_RETURN_IF_ERROR(top.get_string("device", false, &c.device));
  if (c.device.find('/') != std::string::npos) c.device = resolve(base_dir, c.device);
  EV_RETURN_IF_ERROR(top.get_int("threads", false, 0, 4096, &c.threads));
  EV_RETURN_IF_ERROR(top.get_int("default_topk", false, 1, static_cast<int>(1000), &c.default_topk));
  EV_RETURN_IF_ERROR(top.get_bool("kernel_tuning", false, &c.kernel_tuning));

  ConfigMap sock;
  EV_RETURN_IF_ERROR(top.get_map("socket", false, &sock));
  EV_RETURN_IF_ERROR(sock.get_string("path", false, &c.socket_path));
  c.socket_path = resolve(base_dir, c.socket_path);
  EV_RETURN_IF_ERROR(parse_mode(sock, "mode", &c.socket_mode));
  EV_RETURN_IF_ERROR(sock.get_string("group", false, &c.socket_group));
  EV_RETURN_IF_ERROR(get_id_list(sock, "allow_uids", 4294967294.0, &c.allow_uids));
  EV_RETURN_IF_ERROR(get_id_list(sock, "allow_gids", 4294967294.0, &c.allow_gids));
  EV_RETURN_IF_ERROR(sock.finish());

  ConfigMap lim;
  EV_RETURN_IF_ERROR(top.get_map("limits", false, &lim));
  EV_RETURN_IF_ERROR(lim.get_int("max_connections", false, 1, 1024, &c.max_connections));
  EV_RETURN_IF_ERROR(lim.get_int("max_frame_bytes", false, 64, int64_t{1} << 30, &c.max_frame_bytes));
  EV_RETURN_IF_ERROR(lim.get_int("queue_depth", false, 1, 4096, &c.queue_depth));
  EV_RETURN_IF_ERROR(lim.get_int("read_deadline_ms", false, 1, 600000, &c.read_deadline_ms));
  EV_RETURN_IF_ERROR(lim.get_int("idle_timeout_ms", false, 1, 86400000, &c.idle_timeout_ms));
  EV_RETURN_IF_ERROR(lim.get_int("write_deadline_ms", false, 1, 600000, &c.write_deadline_ms));
  EV_RETURN_IF_ERROR(lim.get_int("max_connections_per_uid", false, 0, 1024, &c.max_connections_per_uid));
  EV_RETURN_IF_ERROR(lim.get_int("decode_budget_bytes", false, int64_t{1} << 20, int64_t{1} << 40, &c.decode_budget_bytes));
  EV_RETURN_IF_ERROR(lim.get_int("decode_wait_ms", false, 0, 600000, &c.decode_wait_ms));
  EV_RETURN_IF_ERROR(lim.get_int("reload_timeout_ms", false, 100, 3600000, &c.reload_timeout_ms));
  EV_RETURN_IF_ERROR(lim.finish());

  ConfigMap bat;
  EV_RETURN_IF_ERROR(top.get_map("batching", false, &bat));
  EV_RETURN_IF_ERROR(bat.get_int("max_batch", false, 0, 4096, &c.max_batch));
  EV_RETURN_IF_ERROR(bat.get_int("max_wait_us", false, 0, 1000000, &c.max_wait_us));
  EV_RETURN_IF_ERROR(bat.finish());

  ConfigMap log;
  EV_RETURN_IF_ERROR(top.get_map("log", false, &log));
  EV_RETURN_IF_ERROR(log.get_enum("format", false, kLogFormats, &c.log_format));
  std::vector<std::pair<const char*, std::string>> levels;
  for (const char* l : kLogLevels) levels.emplace_back(l, l);
  EV_RETURN_IF_ERROR(log.get_enum("level", false, levels, &c.log_level));
  EV_RETURN_IF_ERROR(log.finish());

  EV_RETURN_IF_ERROR(read_gpio(top, base_dir, &c.gpio));
  EV_RETURN_IF_ERROR(top.finish());
  c.source_path = display_name;
  EV_RETURN_IF_ERROR(validate_daemon_config(c));
  return c;
}

Status require_regular_file(const std::string& path, const std::string& what) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    const std::string m = what + " " + path + ": " + std::strerror(e);
    return e == ENOENT ? not_found(m) : io_error(m);
  }
  struct stat st {};
  const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  close(fd);
  if (!regular) return io_error(what + " " + path + ": not a regular file (a FIFO, device or directory is refused)");
  return Status::Ok();
}

Result<DaemonConfig> load_daemon_config(const std::string& path) {
  EV_RETURN_IF_ERROR(require_regular_file(path, "daemon config"));
  EV_ASSIGN_OR_RETURN(std::string text, read_config_file(path));
  std::string base = fs::path(path).parent_path().string();
  std::error_code ec;
  const fs::path abs = fs::absolute(base.empty() ? fs::path(".") : fs::path(base), ec);
  if (!ec) base = abs.lexically_normal().string();
  return parse_daemon_config(text, path, base);
}

Status validate_daemon_config(const DaemonConfig& c) {
  const std::string where = c.source_path.empty() ? "edgevitd flags" : c.source_path;
  if (c.socket_path.empty()) return config_error(where + ": socket.path: must not be empty");
  // sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
  if (c.socket_path.size() > 107) return config_error(where + ": socket.path: longer than 107 bytes: " + c.socket_path);
  if (c.gpio.enabled) {
    const auto& g = c.gpio;
    if (g.status_led.offset < 0 && g.trigger.offset < 0 && g.actuator.offset < 0)
      return config_error(where + ": gpio: enabled but no line configured (status_led, trigger or actuator)");
    if (g.actuator.offset >= 0 && g.trigger.offset < 0)
      return config_error(where + ": gpio.actuator: needs gpio.trigger (the actuator acts on trigger results)");
    const int offs[3] = {g.status_led.offset, g.trigger.offset, g.actuator.offset};
    for (int i = 0; i < 3; ++i)
      for (int j = i + 1; j < 3; ++j)
        if (offs[i] >= 0 && offs[i] == offs[j])
          return config_error(where + ": gpio: line offset " + std::to_string(offs[i]) + " used twice");
  }
  return Status::Ok();
}

}  // namespace edgevit::daemon
