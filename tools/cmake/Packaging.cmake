# Install layout and packages (included last from the top-level CMakeLists.txt; driven by tools/package.sh).
#
#   <prefix>/bin/                      edgevit, edgevit-selftest, edgevitd (each target installs itself)
#   <prefix>/lib/                      bundled shared libraries (relocatable tarball only, component "bundled")
#   <prefix>/share/edgevit/config/     devices/*.yaml, models/ (vit-digits with weights and labels; the timm
#                                      templates whose weights `edgevit import` writes)
#   <prefix>/share/edgevit/testdata/   digits/test_split.safetensors (edgevit-selftest's expected outputs)
#   <prefix>/lib/systemd/system/       edgevitd.service, when config/systemd/ has it
#   <prefix>/share/doc/edgevit/        README.md, docs/*.md
# The binaries find config/ and testdata/ relative to themselves (<exe>/../share/edgevit, see
# platform/device_registry.h default_config_dirs), so any prefix works.
#
# Packages:
#   .deb (CPack DEB, prefix /usr): amd64 with Depends computed by dpkg-shlibdeps; arm64 (cross build) with
#        the explicit Depends below (Debian 12 arm64 package names).
#   relocatable tarball: `cmake --install` + `cmake --install --component bundled` into one directory; the
#        binaries carry RPATH $ORIGIN/../lib (DT_RPATH, so it also serves the bundled libraries' own
#        dependencies) and every shared library outside the base system is copied to lib/.
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
install(FILES ${PROJECT_SOURCE_DIR}/tests/data/digits/test_split.safetensors DESTINATION ${_ev_share}/testdata/digits)
if(EXISTS ${PROJECT_SOURCE_DIR}/config/systemd/edgevitd.service)
  install(FILES ${PROJECT_SOURCE_DIR}/config/systemd/edgevitd.service DESTINATION lib/systemd/system)
endif()
file(GLOB _ev_docs ${PROJECT_SOURCE_DIR}/docs/*.md)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${_ev_docs} DESTINATION ${CMAKE_INSTALL_DOCDIR} OPTIONAL)

# ---- relocatable binaries ---------------------------------------------------------------------------------
set(_ev_installed_bins edgevit edgevit-selftest)
if(TARGET edgevitd)
  list(APPEND _ev_installed_bins edgevitd)
endif()
foreach(t IN LISTS _ev_installed_bins)
  set_target_properties(${t} PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
  target_link_options(${t} PRIVATE -Wl,--disable-new-dtags)  # DT_RPATH: also searched for indirect deps
endforeach()

# Libraries never bundled: glibc, the GCC runtime (libstdc++, libgcc_s), libsystemd (part of every systemd
# system, and tied to the running systemd), and the CUDA libraries: the driver (libcuda, libnvidia-*) must be
# the target's own, and cudart/cuBLAS(Lt) come with the target's CUDA installation (JetPack on a board),
# whose version matches its driver; bundling them would pin a toolkit the board may not support (and
# cuBLASLt alone is ~500 MB).
set(_ev_system_libs "^ld-linux" "^linux-vdso" "^libc\\.so" "^libm\\.so" "^libdl\\.so" "^librt\\.so"
    "^libpthread\\.so" "^libresolv\\.so" "^libstdc\\+\\+\\.so" "^libgcc_s\\.so" "^libsystemd\\.so"
    "^libcuda\\.so" "^libnvidia-" "^libcudart\\.so" "^libcublas\\.so" "^libcublasLt\\.so")
set(_ev_lib_dirs "")
if(CMAKE_LIBRARY_ARCHITECTURE)
  foreach(root IN LISTS CMAKE_FIND_ROOT_PATH)
    list(APPEND _ev_lib_dirs ${root}/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE} ${root}/lib/${CMAKE_LIBRARY_ARCHITECTURE}
         ${root}/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread)
  endforeach()
  list(APPEND _ev_lib_dirs /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE} /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread)
endif()
set(_ev_exe_files "")
foreach(t IN LISTS _ev_installed_bins)
  string(APPEND _ev_exe_files " \"\${CMAKE_INSTALL_PREFIX}/bin/$<TARGET_FILE_NAME:${t}>\"")
endforeach()
string(REPLACE "\\" "\\\\" _ev_excl "${_ev_system_libs}")  # the regexes' backslashes survive install(CODE)
string(REPLACE ";" "\" \"" _ev_excl "${_ev_excl}")
string(REPLACE ";" "\" \"" _ev_dirs "${_ev_lib_dirs}")
install(CODE "
  file(GET_RUNTIME_DEPENDENCIES
       EXECUTABLES ${_ev_exe_files}
       RESOLVED_DEPENDENCIES_VAR _deps UNRESOLVED_DEPENDENCIES_VAR _missing
       PRE_EXCLUDE_REGEXES \"${_ev_excl}\"
       DIRECTORIES \"${_ev_dirs}\")
  if(_missing)
    message(FATAL_ERROR \"edgevit: unresolved shared libraries: \${_missing}\")
  endif()
  foreach(_d IN LISTS _deps)
    file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}\" TYPE SHARED_LIBRARY
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
if(CMAKE_CROSSCOMPILING)
  set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE arm64)
  # dpkg-shlibdeps cannot read foreign-architecture binaries reliably; these are the Debian 12 arm64
  # packages of the shared libraries the binaries link (tools/package.sh checks them against the ELF
  # NEEDED entries).
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
      "libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1, libgomp1 (>= 12), libyaml-cpp0.7, libspdlog1.10-fmt9, libfmt9, libopenblas0 | libblas3, libxxhash0, libgpiod2, libsystemd0")
else()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
endif()
include(CPack)
