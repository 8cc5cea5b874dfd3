// edgevit-selftest: the on-target self-test (selftest/selftest.h says what it checks).
//   edgevit-selftest [--quick] [--json] [--model NAME|PATH]... [--device NAME|auto] [--gpio-loopback CHIP:OUT:IN]
// Exit codes: 0 every check passed (skips allowed), 1 a check failed, 2 could not run (usage, missing
// config/weights/expected outputs). The hidden --inject-fault=attention-scale|corrupt-weight|
// unplanned-allocation proves that the checks can fail (tests/selftest/selftest_cli_test.cpp).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "platform/device_registry.h"
#include "selftest/selftest.h"

namespace st = edgevit::selftest;

namespace {

// "gpiochip0:17:18" -> chip, output offset, input offset.
bool parse_loopback(const std::string& text, st::GpioLoopback* g) {
  const size_t a = text.rfind(':');
  if (a == std::string::npos || a == 0) return false;
  const size_t b = text.rfind(':', a - 1);
  if (b == std::string::npos || b == 0) return false;
  try {
    size_t used_out = 0, used_in = 0;
    g->chip = text.substr(0, b);
    g->out_line = std::stoi(text.substr(b + 1, a - b - 1), &used_out);
    g->in_line = std::stoi(text.substr(a + 1), &used_in);
    return used_out == a - b - 1 && used_in == text.size() - a - 1 && g->out_line >= 0 && g->in_line >= 0;
  } catch (const std::exception&) {
    return false;
  }
}

int could_not_run(const edgevit::Status& s, bool json) {
  std::fprintf(stderr, "edgevit-selftest: could not run: %s\n", s.to_string().c_str());
  if (json) {
    nlohmann::ordered_json j{{"result", "error"}, {"code", edgevit::status_code_name(s.code())}, {"error", s.message()}};
    std::cout << j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"edgevit-selftest: platform report, kernel/end-to-end/memory checks of the edgevit runtime"};
  st::SelftestOptions o;
  bool json = false;
  std::string config_dir, loopback, fault = "none";
  if (const char* env = std::getenv("EDGEVIT_THREADS"); env != nullptr && *env != '\0') o.threads = std::atoi(env);
  app.set_version_flag("--version", "edgevit-selftest 0.1.0");
  app.add_flag("--quick", o.quick, "fast subset (< 5 s on a board): first batch of stored images, fewer runs");
  app.add_flag("--json", json, "one JSON object on stdout");
  app.add_option("--model,-m", o.models, "model config name or path (repeatable; default vit-digits)");
  app.add_option("--device,-d", o.device, "device profile name or YAML path, or 'auto' (default: detect)");
  app.add_option("--config-dir", config_dir, "extra base config directory (holds devices/ and models/)");
  app.add_option("--testdata", o.testdata_dir, "directory holding digits/test_split.safetensors");
  app.add_option("--threads,-t", o.threads, "CPU threads (0 = all cores; default $EDGEVIT_THREADS or 0)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--seed", o.seed, "seed of the random kernel inputs (default: fresh, reported)");
  app.add_option("--runs", o.repeat_runs, "inferences for the memory checks (default 20 quick, 200 full)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--gpio-loopback", loopback, "CHIP:OUT:IN, an output line wired to an input line");
  app.add_option("--inject-fault", fault, "test-only")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (!loopback.empty() && !parse_loopback(loopback, &o.gpio))
    return could_not_run(edgevit::invalid_argument("--gpio-loopback must be CHIP:OUT:IN (e.g. gpiochip0:17:18), got '" +
                                                   loopback + "'"),
                         json);
  auto f = st::parse_fault(fault);
  if (!f.ok()) return could_not_run(f.status(), json);
  o.fault = *f;

  o.config_dirs = edgevit::default_config_dirs(argv[0]);
  if (!config_dir.empty()) o.config_dirs.insert(o.config_dirs.begin(), config_dir);
#ifdef EDGEVIT_SOURCE_CONFIG_DIR
  if (o.config_dirs.empty()) o.config_dirs.push_back(EDGEVIT_SOURCE_CONFIG_DIR);
#endif

  const auto report = st::run_selftest(o);
  if (!report.ok()) return could_not_run(report.status(), json);
  if (json) {
    std::cout << st::format_report_json(*report) << "\n";
    for (const auto& c : report->checks)
      if (c.outcome == st::Outcome::kFail)
        std::fprintf(stderr, "edgevit-selftest: FAIL %s%s: %s, bound %s\n", c.name.c_str(),
                     c.model.empty() ? "" : (" (" + c.model + ")").c_str(), c.measured.c_str(), c.bound.c_str());
  } else {
    std::cout << st::format_report_text(*report);
  }
  return st::selftest_exit_code(report);
}
