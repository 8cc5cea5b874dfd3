# Install layout and packages (included last from the top-level CMakeLists.txt; driven by tools/package.sh).
#
#   <prefix>/bin/                      edgevit, edgevit-selftest, edgevitd (each target installs itself)
#   <prefix>/lib/libedgevit.so.0       the library (api/CMakeLists.txt), with lib/cmake/edgevit/ (CMake
#                                      package: edgevit::edgevit) and lib/pkgconfig/edgevit.pc
#   <prefix>/include/edgevit/          edgevit.h (C API), edgevit.hpp (C++ API) and the headers it includes
#   <prefix>/lib/edgevit/              bundled third-party shared libraries (component "bundled": the .deb and
#                                      the tarball): yaml-cpp, OpenBLAS (+ libgfortran), xxhash, libgpiod...
#   <prefix>/share/edgevit/config/     devices/*.yaml, models/ (vit-digits with weights and labels; the timm
#                                      templates whose weights `edgevit import` writes)
#   <prefix>/share/edgevit/testdata/   digits/test_split.safetensors (edgevit-selftest's expected outputs),
#                                      digits/calib_split.safetensors (its int8.vs_fp32 calibration images)
#   <prefix>/lib/systemd/system/       edgevitd.service; lib/sysusers.d/edgevit.conf, lib/tmpfiles.d/edgevit.conf
#   /etc/edgevit/edgevitd.yaml         the daemon's config (component "conffiles": the .deb only, a conffile)
#   <prefix>/share/doc/edgevit/        README.md, docs/*.md
# The binaries find config/ and testdata/ relative to themselves (<exe>/../share/edgevit, see
# platform/device_registry.h default_config_dirs), so any prefix works.
#
# Packages (tools/package.sh builds and proves both):
#   .deb (CPack DEB, prefix /usr): one package for Debian 12 and Ubuntu 22.04 / JetPack 6. Every library
#        that is not part of glibc, the GCC runtime or systemd is bundled privately in /usr/lib/edgevit
#        (the programs and libedgevit.so find it through DT_RPATH), so Depends names only packages both
#        distributions have at compatible versions (below), plus the CUDA runtime for CUDA builds.
#        Maintainer scripts and conffiles: tools/cmake/deb/.
#   relocatable tarball: `cmake --install` + `cmake --install --component bundled` into one directory.
include(GNUInstallDirs)
# `install` / cpack build only what is installed (tools/package.sh builds those targets), not every test.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

set(_ev_share share/edgevit)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/config/devices/ DESTINATION ${_ev_share}/config/devices FILES_MATCHING PATTERN "*.yaml")
# Models that work on an installed system: the embedded digits model, and the timm templates (their weights
# go to models/weights/ via `edgevit import`). Configs that point into the repository's test data are not
# installed.
install(FILES ${PROJECT_SOURCE_DIR}/config/models/vit-digits.yaml ${PROJECT_SOURCE_DIR}/config/models/vit-digits.safetensors
              ${PROJECT_SOURCE_DIR}/config/models/vit-digits.labels.txt
              ${PROJECT_SOURCE_DIR}/config/models/vit-tiny-patch16-224.yaml
              ${PROJECT_SOURCE_DIR}/config/models/vit-small-patch16-224.yaml
              ${PROJECT_SOURCE_DIR}/config/models/vit-base-patch16-224.yaml
        DESTINATION ${_ev_share}/config/models)
# The on-board INT8 speed measurement (docs/deploy.md) and the numpy-only random ViTs it times: it finds
# random_vits.py from its own place (share/edgevit/tools/...) and edgevit on PATH or in ../../../bin.
install(PROGRAMS ${PROJECT_SOURCE_DIR}/tools/board/int8_speed.sh DESTINATION ${_ev_share}/tools/board)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/tools/int8/random_vits.py DESTINATION ${_ev_share}/tools/int8)
install(FILES ${PROJECT_SOURCE_DIR}/tests/data/digits/test_split.safetensors
              ${PROJECT_SOURCE_DIR}/tests/data/digits/calib_split.safetensors DESTINATION ${_ev_share}/testdata/digits)
if(TARGET edgevitd)
  install(FILES ${PROJECT_SOURCE_DIR}/config/systemd/edgevitd.service DESTINATION lib/systemd/system)
  install(FILES ${PROJECT_SOURCE_DIR}/config/systemd/edgevit.sysusers DESTINATION lib/sysusers.d RENAME edgevit.conf)
  install(FILES ${PROJECT_SOURCE_DIR}/config/systemd/edgevit.tmpfiles DESTINATION lib/tmpfiles.d RENAME edgevit.conf)
  # Absolute: only the .deb installs it (tools/package.sh's tarball and `cmake --install` leave /etc alone).
  install(FILES ${PROJECT_SOURCE_DIR}/config/systemd/edgevitd.yaml DESTINATION /etc/edgevit
          COMPONENT conffiles EXCLUDE_FROM_ALL)
endif()
file(GLOB _ev_docs ${PROJECT_SOURCE_DIR}/docs/*.md)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${_ev_docs} DESTINATION ${CMAKE_INSTALL_DOCDIR} OPTIONAL)

# ---- relocatable binaries ---------------------------------------------------------------------------------
set(_ev_installed_bins edgevit edgevit-selftest)
if(TARGET edgevitd)
  list(APPEND _ev_installed_bins edgevitd)
endif()
foreach(t IN LISTS _ev_installed_bins)
  set_target_properties(${t} PROPERTIES INSTALL_RPATH "$ORIGIN/../lib/edgevit")
  target_link_options(${t} PRIVATE -Wl,--disable-new-dtags)  # DT_RPATH: also searched for indirect deps
endforeach()

# Libraries never bundled: glibc, the GCC runtime (libstdc++, libgcc_s, libgomp), libsystemd (part of every systemd
# system, and tied to the running systemd), and the CUDA libraries: the driver (libcuda, libnvidia-*) must be
# the target's own, and cudart/cuBLAS(Lt) come with the target's CUDA installation (JetPack on a board),
# whose version matches its driver; bundling them would pin a toolkit the board may not support (and
# cuBLASLt alone is ~500 MB).
set(_ev_system_libs "^ld-linux" "^linux-vdso" "^libc\\.so" "^libm\\.so" "^libdl\\.so" "^librt\\.so"
    "^libpthread\\.so" "^libresolv\\.so" "^libstdc\\+\\+\\.so" "^libgcc_s\\.so" "^libgomp\\.so" "^libsystemd\\.so"
    "^libcuda\\.so" "^libnvidia-" "^libcudart\\.so" "^libcublas\\.so" "^libcublasLt\\.so")
set(_ev_lib_dirs "")
if(CMAKE_LIBRARY_ARCHITECTURE)
  foreach(root IN LISTS CMAKE_FIND_ROOT_PATH)
    list(APPEND _ev_lib_dirs ${root}/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE} ${root}/lib/${CMAKE_LIBRARY_ARCHITECTURE}
         ${root}/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread)
  endforeach()
  list(APPEND _ev_lib_dirs /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE} /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread)
endif()
# Installed paths, read at install time: $DESTDIR (CPack) + prefix.
set(_ev_exe_files "")
foreach(t IN LISTS _ev_installed_bins)
  string(APPEND _ev_exe_files " \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/bin/$<TARGET_FILE_NAME:${t}>\"")
endforeach()
set(_ev_lib_files "\"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/$<TARGET_FILE_NAME:edgevit_shared>\"")
string(REPLACE "\\" "\\\\" _ev_excl "${_ev_system_libs}")  # the regexes' backslashes survive install(CODE)
string(REPLACE ";" "\" \"" _ev_excl "${_ev_excl}")
string(REPLACE ";" "\" \"" _ev_dirs "${_ev_lib_dirs}")
install(CODE "
  file(GET_RUNTIME_DEPENDENCIES
       EXECUTABLES ${_ev_exe_files}
       LIBRARIES ${_ev_lib_files}
       RESOLVED_DEPENDENCIES_VAR _deps UNRESOLVED_DEPENDENCIES_VAR _missing
       PRE_EXCLUDE_REGEXES \"${_ev_excl}\"
       DIRECTORIES \"${_ev_dirs}\")
  if(_missing)
    message(FATAL_ERROR \"edgevit: unresolved shared libraries: \${_missing}\")
  endif()
  foreach(_d IN LISTS _deps)
    file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/edgevit\" TYPE SHARED_LIBRARY
         FOLLOW_SYMLINK_CHAIN FILES \"\${_d}\")
  endforeach()
" COMPONENT bundled EXCLUDE_FROM_ALL)

# ---- CPack: .deb -----------------------------------------------------------------------------------------
set(CPACK_PACKAGE_NAME edgevit)
set(CPACK_PACKAGE_VENDOR "edgevit")
set(CPACK_PACKAGE_CONTACT "edgevit maintainers <edgevit@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "static-allocation Vision Transformer inference runtime for Jetson-class devices")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "edgevit plans every byte of a ViT before it runs and serves it from one arena.
 Programs: edgevit (plan, run, bench, import, client), edgevitd (systemd service, config in
 /etc/edgevit/edgevitd.yaml), edgevit-selftest. Library: libedgevit.so with the C API (edgevit.h), the C++
 API (edgevit.hpp), CMake (find_package(edgevit)) and pkg-config files. Third-party libraries are bundled
 in /usr/lib/edgevit.")
# The .deb stages with DESTDIR so that the absolute /etc destination lands in the package, and installs
# the default components, the bundled libraries and the conffile.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)  # with DESTDIR staging, CPack installs to this prefix
set(CPACK_INSTALL_CMAKE_PROJECTS "${CMAKE_BINARY_DIR};edgevit;ALL;/" "${CMAKE_BINARY_DIR};edgevit;bundled;/")
if(TARGET edgevitd)
  list(APPEND CPACK_INSTALL_CMAKE_PROJECTS "${CMAKE_BINARY_DIR};edgevit;conffiles;/")
endif()
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/tools/cmake/deb/conffiles
    ${PROJECT_SOURCE_DIR}/tools/cmake/deb/postinst ${PROJECT_SOURCE_DIR}/tools/cmake/deb/prerm
    ${PROJECT_SOURCE_DIR}/tools/cmake/deb/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# What stays outside the package: glibc (the binaries need at most GLIBC_2.34; Ubuntu 22.04 has 2.35),
# the GCC 12 runtime (GLIBCXX_3.4.30 at most: Debian 12's gcc 12 and Ubuntu 22.04's libstdc++6 12.3 both
# have it) and libsystemd0; tools/package.sh checks the symbol versions and that every other NEEDED
# library is in the package. Same list for amd64 and arm64.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1 (>= 3.0), libgomp1 (>= 12), libsystemd0")
# CUDA builds: the CUDA runtime of the target's installation, by the package names of NVIDIA's repositories,
# which are also JetPack 6's (cuda-cudart-12-2 and libcublas-12-2 on JetPack 6.0; docs/deploy.md).
if(EDGEVIT_HAVE_CUDA)
  set(_ev_cuda_suffix "${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", cuda-cudart-${_ev_cuda_suffix}, libcublas-${_ev_cuda_suffix}")
endif()
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
if(CMAKE_CROSSCOMPILING)
  set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE arm64)
endif()
include(CPack)
