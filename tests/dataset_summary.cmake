# dataset_summary.cmake - run by ctest after the tests (CTEST_CUSTOM_POST_TEST, see
# CMakeLists.txt): prints one line with how many tests (and Python test methods) of this run
# were skipped because they need the whole dataset. Each such test printed one "SKIPPED: needs
# the whole dataset" line, which ctest keeps in its log of the run.
#   cmake -P dataset_summary.cmake BUILD_DIR
set(dir "${CMAKE_ARGV3}/Testing/Temporary")
set(log "${dir}/LastTest.log.tmp")
if(NOT EXISTS "${log}")
  set(log "${dir}/LastTest.log")
endif()
if(EXISTS "${log}")
  file(STRINGS "${log}" skipped REGEX "^SKIPPED: needs the whole dataset")
  list(LENGTH skipped n)
  # Methods of the Python test files that read the dataset's folder (its onnx-models beside
  # it) skip one by one: unittest -v logs "... skipped 'needs ... the whole dataset ...'".
  file(STRINGS "${log}" methods REGEX "skipped 'needs .*the whole dataset")
  list(LENGTH methods m)
  if(n GREATER 0 OR m GREATER 0)
    message("${n} tests and ${m} test methods skipped: they need the whole dataset (ctest label shared-data; Python methods marked needs_shared); set NEUSIGHT_DATASET to the neusight-data folder to run them")
  endif()
endif()
