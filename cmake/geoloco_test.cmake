# geoloco_test(NAME name SOURCES ... LIBS ... [SANITIZE] [THREADS] [LABELS ...] [TIMEOUT s])
#
# One Catch2 executable registered as one ctest test. In a GEOLOCO_SANITIZE
# build only the tests marked SANITIZE (those that parse or decode untrusted
# input) are defined, so the sanitizer pass stays short; in a GEOLOCO_TSAN
# build only those marked THREADS (those that run code on several threads).
set(GEOLOCO_CATCH_MAIN_SOURCE ${CMAKE_CURRENT_LIST_DIR}/catch_main.cpp)

function(geoloco_test)
  cmake_parse_arguments(T "SANITIZE;THREADS" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(GEOLOCO_SANITIZE AND NOT T_SANITIZE)
    return()
  endif()
  if(GEOLOCO_TSAN AND NOT T_THREADS)
    return()
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} geoloco_catch_main)
  if(T_THREADS)
    target_link_libraries(${T_NAME} PRIVATE geoloco_threads_test_init)
  endif()
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} --order rand --rng-seed 20261130
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set(labels ${T_LABELS})
  if(T_SANITIZE)
    list(APPEND labels sanitize)
  endif()
  if(T_THREADS)
    list(APPEND labels threads)
  endif()
  # A case that cannot run here says "SKIPPED: why" (a Catch2 WARN): the
  # executable exits 77 when nothing failed (catch_main.cpp), and ctest
  # reports the test as skipped, never as passed; a failure anywhere in the
  # executable is a failure, whatever was skipped.
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${labels}"
    SKIP_RETURN_CODE 77)
  if(GEOLOCO_SANITIZE)
    add_dependencies(geoloco_sanitize_tests ${T_NAME})
  endif()
  if(GEOLOCO_TSAN)
    add_dependencies(geoloco_thread_tests ${T_NAME})
    set_tests_properties(${T_NAME} PROPERTIES ENVIRONMENT
      "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 suppressions=${PROJECT_SOURCE_DIR}/cmake/tsan.supp")
  endif()
endfunction()

# Catch2 v2's main is slow to compile: build it once.
add_library(geoloco_catch_main STATIC ${GEOLOCO_CATCH_MAIN_SOURCE})
target_link_libraries(geoloco_catch_main PUBLIC Catch2::Catch2)

# THREADS tests make spdlog's default logger before main (threads_test_init.cpp).
# An OBJECT library, so its static initializer is always linked in.
find_package(spdlog REQUIRED)
add_library(geoloco_threads_test_init OBJECT ${CMAKE_CURRENT_LIST_DIR}/threads_test_init.cpp)
target_link_libraries(geoloco_threads_test_init PUBLIC spdlog::spdlog)

if(GEOLOCO_SANITIZE)
  add_custom_target(geoloco_sanitize_tests)
endif()
if(GEOLOCO_TSAN)
  add_custom_target(geoloco_thread_tests)
endif()

# geoloco_fuzzer(NAME name SOURCE file.cpp LIBS ... CORPUS dir [RUNS n])
#
# A libFuzzer target (GEOLOCO_FUZZ builds, clang only), plus a ctest test
# that fuzzes RUNS inputs (default 50000) from seed 1, seeded with CORPUS.
# A fixed number of runs, not a time budget: the same inputs on a fast or a
# slow machine, so CI is reproducible (longer runs: run the binary by hand
# with -max_total_time). New inputs go to a scratch folder in the build
# tree, never into the source tree.
function(geoloco_fuzzer)
  cmake_parse_arguments(F "" "NAME;SOURCE;CORPUS;RUNS" "LIBS" ${ARGN})
  if(NOT GEOLOCO_FUZZ)
    return()
  endif()
  if(NOT F_RUNS)
    set(F_RUNS 50000)
  endif()
  add_executable(${F_NAME} ${F_SOURCE})
  target_compile_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
  target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${F_NAME} PRIVATE ${F_LIBS})
  add_test(NAME ${F_NAME}
           COMMAND sh -c "rm -rf ${F_NAME}_new && mkdir -p ${F_NAME}_new && exec $<TARGET_FILE:${F_NAME}> -runs=${F_RUNS} -rss_limit_mb=2048 -seed=1 ${F_NAME}_new ${F_CORPUS}"
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(${F_NAME} PROPERTIES TIMEOUT 120 LABELS "sanitize;fuzz")
  add_dependencies(geoloco_sanitize_tests ${F_NAME})
endfunction()
