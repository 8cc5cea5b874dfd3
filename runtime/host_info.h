// The host CPU as the programs above runtime/ see it (the CLI, edgevitd): which GEMM library and OpenBLAS
// core serve the CPU backend, and the per-thread thread count. Thin wrappers over kernels/cpu, so that
// programs and serving/ include nothing from kernels/.
#pragma once

namespace edgevit {

// The GEMM library that serves linear layers in this build on this CPU ("libxsmm (...)", "OpenBLAS").
const char* host_gemm_library();
// OpenBLAS's kernel family for this CPU ("SkylakeX", "Haswell", "Prescott", ...).
const char* host_blas_core();
// When OpenBLAS fell back to an old generic kernel on a CPU that has AVX2/AVX-512, the OPENBLAS_CORETYPE
// value that would serve it; else nullptr. OpenBLAS reads it only when loaded: callers re-execute with it set.
const char* host_blas_better_coretype();
// Sets OpenBLAS's and the calling thread's OpenMP thread count (OpenMP's is per thread: a thread that runs
// an Engine it did not create calls this with Engine::threads()).
void set_host_threads(int threads);

}  // namespace edgevit
