# NCCL for examples/mpi_train's gradient averaging: optional, and looked for
# where it is installed in practice, first root that has both nccl.h and the
# library (so the header and the library come from the same release):
#   FEEDER_NCCL_ROOT (-D or environment), the CUDA toolkit (CUDA 13 ships
#   NCCL in its lib/), /usr (libnccl-dev), /usr/local, and Python's
#   site-packages/nvidia/{nccl,cu*} (the nvidia-nccl wheel that PyTorch brings,
#   whose library is only libnccl.so.2, with no libnccl.so link).
# Sets FEEDER_NCCL_INCLUDE_DIR and FEEDER_NCCL_LIBRARY (empty when not found).
# -DFEEDER_WITH_NCCL=OFF skips it: mpi_train then averages with MPI.
option(FEEDER_WITH_NCCL "examples/mpi_train: average gradients with NCCL when found" ON)
set(FEEDER_NCCL_INCLUDE_DIR "")
set(FEEDER_NCCL_LIBRARY "")
if(FEEDER_WITH_NCCL)
  set(_nccl_roots ${FEEDER_NCCL_ROOT} $ENV{FEEDER_NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT}
      ${CUDAToolkit_TARGET_DIR} /usr /usr/local)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c
        "import site; print(';'.join(site.getsitepackages() + [site.getusersitepackages()]))"
      OUTPUT_VARIABLE _nccl_site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    foreach(_d IN LISTS _nccl_site)
      file(GLOB _nccl_wheels LIST_DIRECTORIES true "${_d}/nvidia/nccl" "${_d}/nvidia/cu*")
      list(APPEND _nccl_roots ${_nccl_wheels})
    endforeach()
  endif()
  foreach(_root IN LISTS _nccl_roots)
    if(EXISTS "${_root}/include/nccl.h")
      find_library(_nccl_lib NAMES nccl libnccl.so.2 PATHS ${_root}
                   PATH_SUFFIXES lib lib64 lib/${CMAKE_LIBRARY_ARCHITECTURE}
                   NO_DEFAULT_PATH NO_CACHE)
      if(_nccl_lib)
        set(FEEDER_NCCL_INCLUDE_DIR ${_root}/include)
        set(FEEDER_NCCL_LIBRARY ${_nccl_lib})
        break()
      endif()
    endif()
  endforeach()
endif()
if(FEEDER_NCCL_LIBRARY)
  message(STATUS "feeder: NCCL for mpi_train: ${FEEDER_NCCL_LIBRARY}")
else()
  message(STATUS "feeder: NCCL for mpi_train: not used (MPI_Allreduce averages the gradients)")
endif()
