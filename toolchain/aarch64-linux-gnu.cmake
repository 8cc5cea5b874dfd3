# Cross-compiling edgevit for aarch64 Linux (Jetson Orin / L4T, or any arm64 Debian/Ubuntu).
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=toolchain/aarch64-linux-gnu.cmake   (tools/cross_build.sh)
#
# Libraries come from one of:
#   EDGEVIT_SYSROOT (cache or environment): a copy of a board's root file system (JetPack: rsync / of the
#     Jetson, or L4T's sample rootfs with the -dev packages installed). Compiler and pkg-config look there.
#   otherwise Debian multiarch: `dpkg --add-architecture arm64` and the :arm64 -dev packages of tools/deps.sh
#     (libraries in /usr/lib/aarch64-linux-gnu, pkg-config files in /usr/lib/aarch64-linux-gnu/pkgconfig).
#     Header-only packages (nlohmann-json, CLI11) are architecture-independent and used from /usr.
#   EDGEVIT_CROSS_EXTRA_ROOT (optional): extra roots searched like the sysroot, for -dev packages that
#     cannot be co-installed with their amd64 twin (libyaml-cpp-dev is not Multi-Arch: same in Debian 12;
#     tools/cross_build.sh unpacks its arm64 .deb there instead of installing it).
# CUDA (sm_87 only) is enabled when a CUDA toolkit with aarch64-linux targets is found (JetPack sysroot's
# /usr/local/cuda, or NVIDIA's cuda-cross-aarch64 packages on the host: /usr/local/cuda/targets/aarch64-linux);
# otherwise the build is CPU-only and says so once.
# Tests run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR) when it is installed (Debian: qemu-user), with
# one OpenMP thread (OMP_NUM_THREADS=1, EDGEVIT_THREADS=1: emulated threads only add time).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(_ev_triple aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${_ev_triple}-gcc)
set(CMAKE_CXX_COMPILER ${_ev_triple}-g++)
set(CMAKE_LIBRARY_ARCHITECTURE ${_ev_triple})

if(NOT DEFINED EDGEVIT_SYSROOT AND DEFINED ENV{EDGEVIT_SYSROOT})
  set(EDGEVIT_SYSROOT "$ENV{EDGEVIT_SYSROOT}")
endif()
set(EDGEVIT_SYSROOT "${EDGEVIT_SYSROOT}" CACHE PATH "aarch64 root file system (empty: Debian multiarch)")
if(NOT DEFINED EDGEVIT_CROSS_EXTRA_ROOT AND DEFINED ENV{EDGEVIT_CROSS_EXTRA_ROOT})
  set(EDGEVIT_CROSS_EXTRA_ROOT "$ENV{EDGEVIT_CROSS_EXTRA_ROOT}")
endif()
set(EDGEVIT_CROSS_EXTRA_ROOT "${EDGEVIT_CROSS_EXTRA_ROOT}" CACHE PATH "extra aarch64 roots (unpacked .debs)")
# try_compile projects see these too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES EDGEVIT_SYSROOT EDGEVIT_CROSS_EXTRA_ROOT)

if(EDGEVIT_SYSROOT)
  set(CMAKE_SYSROOT "${EDGEVIT_SYSROOT}")
  set(CMAKE_FIND_ROOT_PATH "${EDGEVIT_SYSROOT}" ${EDGEVIT_CROSS_EXTRA_ROOT})
  set(ENV{PKG_CONFIG_SYSROOT_DIR} "${EDGEVIT_SYSROOT}")
  set(ENV{PKG_CONFIG_LIBDIR}
      "${EDGEVIT_SYSROOT}/usr/lib/${_ev_triple}/pkgconfig:${EDGEVIT_SYSROOT}/usr/lib/pkgconfig:${EDGEVIT_SYSROOT}/usr/share/pkgconfig")
  set(_ev_qemu_prefix "${EDGEVIT_SYSROOT}")
else()
  # "/" holds the multiarch libraries (lib/aarch64-linux-gnu) and the arch-independent headers and CMake
  # configs; /usr/aarch64-linux-gnu is the cross toolchain's own libc/libstdc++.
  set(CMAKE_FIND_ROOT_PATH ${EDGEVIT_CROSS_EXTRA_ROOT} / /usr/${_ev_triple})
  set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${_ev_triple}/pkgconfig:/usr/share/pkgconfig")
  # qemu needs no -L when libc6:arm64 is installed (/lib/ld-linux-aarch64.so.1): everything then loads from
  # multiarch. -L /usr/aarch64-linux-gnu would load the cross toolchain's libc/libgomp instead, and OpenMP
  # parallel regions hang in that mix (measured: qemu 7.2, Debian 12).
  if(EXISTS /lib/ld-linux-aarch64.so.1)
    set(_ev_qemu_prefix "")
  else()
    set(_ev_qemu_prefix /usr/${_ev_triple})
  endif()
endif()
# Programs (pkg-config, nvcc, qemu) are the host's; libraries and packages only the target's; headers from
# either root (arch-independent ones live in the host's /usr/include).
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ---- CUDA: only with a toolkit that has aarch64 targets -------------------------------------------------
get_property(_ev_in_try_compile GLOBAL PROPERTY IN_TRY_COMPILE)
set(_ev_cuda_roots "$ENV{EDGEVIT_CUDA_CROSS_ROOT}" /usr/local/cuda)
if(EDGEVIT_SYSROOT)
  list(PREPEND _ev_cuda_roots "${EDGEVIT_SYSROOT}/usr/local/cuda")
endif()
list(FILTER _ev_cuda_roots EXCLUDE REGEX "^$")
set(_ev_cuda_target "")
foreach(_root IN LISTS _ev_cuda_roots)
  if(_root AND EXISTS "${_root}/targets/aarch64-linux/lib/libcudart.so" AND EXISTS "/usr/local/cuda/bin/nvcc")
    set(_ev_cuda_target "${_root}")
    break()
  endif()
endforeach()
if(_ev_cuda_target)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)  # the host's nvcc; CMake passes -target-dir aarch64-linux
  set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
  set(CUDAToolkit_ROOT "${_ev_cuda_target}")
  set(EDGEVIT_CUDA_ARCHS 87 CACHE STRING "CUDA architectures (SASS is emitted for each)")
  set(_ev_cuda_message "CUDA sm_87 with the aarch64 targets of ${_ev_cuda_target}")
else()
  if(EDGEVIT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "EDGEVIT_CUDA=ON but no CUDA toolkit with aarch64-linux targets was found in: ${_ev_cuda_roots}")
  endif()
  set(EDGEVIT_CUDA OFF CACHE STRING "CUDA backend: AUTO, ON or OFF" FORCE)
  set(_ev_cuda_message "CPU-only: no CUDA toolkit with aarch64-linux targets (looked for targets/aarch64-linux in "
                       "${_ev_cuda_roots}; set EDGEVIT_SYSROOT to a JetPack root fs or install cuda-cross-aarch64)")
endif()

# ---- running what was built ----------------------------------------------------------------------------
find_program(EDGEVIT_QEMU_AARCH64 qemu-aarch64)
if(EDGEVIT_QEMU_AARCH64)
  if(_ev_qemu_prefix)
    set(_ev_qemu ${EDGEVIT_QEMU_AARCH64} -L ${_ev_qemu_prefix})
  else()
    set(_ev_qemu ${EDGEVIT_QEMU_AARCH64})
  endif()
  string(REPLACE ";" " " _ev_qemu_text "${_ev_qemu}")
  set(CMAKE_CROSSCOMPILING_EMULATOR env OMP_NUM_THREADS=1 EDGEVIT_THREADS=1 "EDGEVIT_TEST_EMULATOR=${_ev_qemu_text}" ${_ev_qemu})
  set(_ev_run_message "tests run under ${_ev_qemu_text}")
else()
  set(_ev_run_message "no qemu-aarch64 (Debian: qemu-user): tests can only run on a board")
endif()

get_property(_ev_announced GLOBAL PROPERTY EDGEVIT_TOOLCHAIN_ANNOUNCED)
if(NOT _ev_in_try_compile AND NOT _ev_announced)
  set_property(GLOBAL PROPERTY EDGEVIT_TOOLCHAIN_ANNOUNCED TRUE)
  if(EDGEVIT_SYSROOT)
    set(_ev_libs "sysroot ${EDGEVIT_SYSROOT}")
  else()
    set(_ev_libs "Debian multiarch")
  endif()
  message(STATUS "edgevit: cross build for aarch64 (${_ev_libs}); ${_ev_cuda_message}; ${_ev_run_message}")
endif()
