# The benchmarks' shared helpers (bench/benchutil.h), one file per concern.
# Every CMakeLists that builds a program on them (bench/, tests/, examples/)
# includes this file and lists FEEDER_BENCHUTIL_SOURCES, so a new file goes
# in here once.
set(FEEDER_BENCHUTIL_SOURCES
  ${PROJECT_SOURCE_DIR}/bench/benchutil_photos.c
  ${PROJECT_SOURCE_DIR}/bench/benchutil_files.c
  ${PROJECT_SOURCE_DIR}/bench/benchutil_report.c)
