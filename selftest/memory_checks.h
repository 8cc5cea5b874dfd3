// Internal to edgevit_selftest: the memory.* checks of one engine (memory_checks.cpp), called by run_model
// in selftest.cpp.
#pragma once

#include <string>
#include <vector>

#include "runtime/engine.h"
#include "selftest/alloc_counter.h"
#include "selftest/selftest.h"

namespace edgevit::selftest {

// memory.arena_single_allocation: what the engine's create() and first infer() really allocated (`u`,
// counted by alloc_counter.h) against its plan's memory lines. `how` says what ran in the window.
CheckResult arena_check(const Engine& e, const MemoryUse& u, const std::string& how, const std::string& model);

// memory.zero_allocations, memory.no_new_mappings, memory.bit_identical: `runs` inferences of `input`
// (`n` images) allocate nothing, map nothing, and give bit-identical outputs.
void memory_checks(Engine& e, const float* input, int n, int runs, const std::string& model,
                   std::vector<CheckResult>* out);

}  // namespace edgevit::selftest
