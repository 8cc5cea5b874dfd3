// `edgevit calibrate` and `edgevit compare` (programs/edgevit/cmd_int8.cpp, docs/int8.md).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

struct Int8Commands {
  CLI::App* calibrate = nullptr;
  CLI::App* compare = nullptr;
  std::string model, images, method = "mse", output;
  int samples = 0;
  double warn_db = 20;
  int threads = 1;
  bool ln_fold = false;
  bool bias_correction = true;  // --no-bias-correction turns it off
  std::string cmp_model, precisions = "fp32,int8", cmp_input;
  int cmp_samples = 0;
  double cmp_warn_db = 20;
};

Int8Commands add_int8_commands(CLI::App& app);
int cmd_calibrate(const Int8Commands& c, const std::vector<std::string>& dev_dirs);
int cmd_compare(const Int8Commands& c, const std::vector<std::string>& dev_dirs);
