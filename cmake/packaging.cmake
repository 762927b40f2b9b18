# Install rules and the Debian package (CPack DEB), plus the tests of both:
# systemd_units_verify and packaging_deb. Included by the top level after the
# add_subdirectory loop, so that `if(TARGET ...)` sees every program.
# packaging/README.md says how to build and install the package.
#
# Layout of the package (prefix /usr):
#   /usr/bin/geoloco, geoloco-train, geolocod, geoloco-faultproxy (and geoloco-train-cuda in a CUDA build)
#   /lib/systemd/system/geolocod.service, geolocod@.service
#   /usr/lib/python3/dist-packages/geoloco/      (the Python package: numpy only; geoloco.torch also needs python3-torch)
#   /usr/share/geoloco/configs/{sites,jobs}/     (the example configs)
#   /usr/share/doc/geoloco/README.md
# Units go to /lib/systemd/system, not /usr/lib: Debian 12 packages still
# ship them there (merged /usr aliasing), so the path is absolute and CPack
# installs through DESTDIR (CPACK_SET_DESTDIR) to keep it inside the package.

set(GEOLOCO_SYSTEMD_UNIT_DIR "/lib/systemd/system" CACHE PATH "Where the systemd units are installed")

set(_geoloco_pkg_programs geoloco geoloco-train)
set(_geoloco_pkg_geolocod 0)
if(TARGET geolocod)
  list(APPEND _geoloco_pkg_programs geolocod)
  set(_geoloco_pkg_geolocod 1)
endif()
if(TARGET geoloco-faultproxy)
  list(APPEND _geoloco_pkg_programs geoloco-faultproxy)
endif()
if(TARGET geoloco-train-cuda)  # what geoloco-train --backend cuda runs (inner/CMakeLists.txt)
  list(APPEND _geoloco_pkg_programs geoloco-train-cuda)
endif()
install(TARGETS ${_geoloco_pkg_programs} RUNTIME DESTINATION bin)
install(FILES configs/systemd/geolocod.service configs/systemd/geolocod@.service
        DESTINATION ${GEOLOCO_SYSTEMD_UNIT_DIR})
install(DIRECTORY python/geoloco DESTINATION lib/python3/dist-packages
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
# configs/jobs/tests/ holds deliberately broken files for the tests: not examples.
install(DIRECTORY configs/sites configs/jobs DESTINATION share/geoloco/configs
        FILES_MATCHING PATTERN "*.yaml" PATTERN "tests" EXCLUDE)
install(FILES README.md DESTINATION share/doc/geoloco)
# The PyTorch loops (geoloco.torch), where Debian keeps a package's examples.
install(FILES examples/torch_fashion_mnist.py examples/torch_ddp_gpt.py DESTINATION share/doc/geoloco/examples)

set(GEOLOCO_DEB_MAINTAINER "geoloco maintainers <geoloco@example.org>" CACHE STRING
    "Maintainer field of the Debian package")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME geoloco)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${GEOLOCO_DEB_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "DiLoCo training of one model across datacenters")
string(JOIN "\n" CPACK_PACKAGE_DESCRIPTION
  "Each site trains on its own GPUs; every H steps the sites exchange a"
  "compressed pseudo-gradient over mutually authenticated TLS and take one"
  "DiLoCo outer step. This package holds the site daemon geolocod with its"
  "systemd units, the geoloco command, the built-in trainer geoloco-train,"
  "the numpy-only Python client and example site and job files.")
# With DESTDIR packaging CPack installs under CPACK_INSTALL_PREFIX (by default
# the build's CMAKE_INSTALL_PREFIX, /usr/local), so both say /usr.
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${GEOLOCO_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Library dependencies come from dpkg-shlibdeps (it works on Debian 12);
# these are what it cannot see: the maintainer scripts' adduser and the
# Python package's interpreter and numpy.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, python3, python3-numpy")
# geoloco.torch (a PyTorch loop as a site's trainer) imports torch.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-torch")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/debian/postinst
    ${PROJECT_SOURCE_DIR}/packaging/debian/prerm
    ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# cpack (and make install) package what is built and never start a build:
# the packaging_deb test must not compile behind ctest's back, and a missing
# program then fails loudly ("cannot find .../bin/geoloco") instead of
# building for minutes. Build first: cmake --build build.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)
include(CPack)

# The tests. Not in a sanitizer build: it builds only the sanitize tests, not
# the programs the package needs, and its ctest runs label sanitize alone.
if(GEOLOCO_ALL_TESTS)
  set(_geoloco_pkg_program_files "")
  foreach(program IN LISTS _geoloco_pkg_programs)
    list(APPEND _geoloco_pkg_program_files $<TARGET_FILE:${program}>)
  endforeach()
  add_test(NAME systemd_units_verify
           COMMAND sh ${PROJECT_SOURCE_DIR}/packaging/tests/verify_units.sh ${PROJECT_SOURCE_DIR}/configs/systemd)
  set_tests_properties(systemd_units_verify PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 60 LABELS packaging)

  add_test(NAME packaging_deb
           COMMAND sh ${PROJECT_SOURCE_DIR}/packaging/tests/check_deb.sh
                   ${CMAKE_BINARY_DIR} ${CPACK_PACKAGE_NAME} ${CPACK_PACKAGE_VERSION} ${_geoloco_pkg_geolocod}
                   ${_geoloco_pkg_program_files})
  set_tests_properties(packaging_deb PROPERTIES TIMEOUT 120 LABELS packaging)

  # Opt-in (label "install": scripts/test.sh --install): apt-get installs the
  # package on this machine, runs the installed daemon, then purges it.
  add_test(NAME packaging_install_deb
           COMMAND sh ${PROJECT_SOURCE_DIR}/packaging/tests/install_deb.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(packaging_install_deb PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS install
                       RESOURCE_LOCK system_packages)
endif()
