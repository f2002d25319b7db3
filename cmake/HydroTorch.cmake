# Which libtorch hydro builds against: the one HYDRO_PYTHON's torch ships when it ships its CMake
# files (a pip or conda torch: torch.utils.cmake_prefix_path), else the system's (Debian's
# libtorch-dev, which python3-torch loads too). One libtorch in a process: the binding must link
# the one that interpreter's torch loads (cmake/HydroPython.cmake checks the versions).
# PYTHONPATH is unset for the question: pip's isolated build sets it to hide the environment's
# packages, torch among them, from the build.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH ${HYDRO_PYTHON} -c [=[
import os, torch
p = torch.utils.cmake_prefix_path
print(p if os.path.isfile(os.path.join(p, 'Torch', 'TorchConfig.cmake')) else '')
]=]
  RESULT_VARIABLE hydro_torch_rc OUTPUT_VARIABLE hydro_torch_prefix ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
if(hydro_torch_rc EQUAL 0 AND hydro_torch_prefix)
  message(STATUS "hydro: the libtorch of ${HYDRO_PYTHON}'s torch, in ${hydro_torch_prefix}")
  # A CUDA torch's CMake files need the CUDA toolkit: nvcc on PATH, CUDA_HOME, or /usr/local/cuda.
  if(NOT CUDAToolkit_ROOT AND NOT CMAKE_CUDA_COMPILER)
    find_program(HYDRO_NVCC nvcc HINTS $ENV{CUDA_HOME}/bin /usr/local/cuda/bin)
    if(HYDRO_NVCC)
      get_filename_component(CUDAToolkit_ROOT ${HYDRO_NVCC} DIRECTORY)
      get_filename_component(CUDAToolkit_ROOT ${CUDAToolkit_ROOT} DIRECTORY)
    endif()
  endif()
  # torch's CMake files look for libtorch.so and libc10.so by name, the system's directories
  # before the torch's own: with Debian's libtorch-dev installed too, they would take its 1.13.
  # Name the torch's own first; HYDRO_TORCH_NAMED_LIBS names them again for find_package(hydro)
  # (cmake/hydroConfig.cmake.in).
  get_filename_component(hydro_torch_lib ${hydro_torch_prefix}/../../lib ABSOLUTE)
  set(HYDRO_TORCH_NAMED_LIBS "")
  foreach(pair TORCH_LIBRARY:torch c10_LIBRARY:c10 C10_CUDA_LIBRARY:c10_cuda CAFFE2_NVRTC_LIBRARY:caffe2_nvrtc)
    string(REPLACE ":" ";" pair ${pair})
    list(GET pair 0 var)
    list(GET pair 1 lib)
    if(EXISTS ${hydro_torch_lib}/lib${lib}.so)
      set(${var} ${hydro_torch_lib}/lib${lib}.so CACHE FILEPATH "libtorch's ${lib}, from ${HYDRO_PYTHON}'s torch")
      string(APPEND HYDRO_TORCH_NAMED_LIBS "  set(${var} \"${${var}}\" CACHE FILEPATH \"the lib${lib}.so hydro was built against\")\n")
    endif()
  endforeach()
  list(PREPEND CMAKE_PREFIX_PATH ${hydro_torch_prefix})
  find_package(Torch REQUIRED)
  if(NOT TORCH_LIBRARY MATCHES "^${hydro_torch_lib}/")
    message(FATAL_ERROR "hydro: ${HYDRO_PYTHON}'s torch is in ${hydro_torch_lib}, but CMake found its libtorch at ${TORCH_LIBRARY}")
  endif()
  # An installed program finds this libtorch where it is (examples/ and runtime/CMakeLists.txt).
  set(HYDRO_TORCH_RPATH ${hydro_torch_lib})
  # A pip torch's libraries find CUDA's (cuDNN, NCCL, ...) in the nvidia packages beside it through
  # their RPATH ($ORIGIN/../../nvidia/*/lib), which the loader follows but the linker does not: a
  # program linked against them would take an older NCCL from the system's directories (the CUDA
  # toolkit's) and fail on its missing symbols. The linker is told where they are.
  file(GLOB hydro_torch_deps LIST_DIRECTORIES true ${hydro_torch_lib}/../../nvidia/*/lib)
  if(hydro_torch_deps)
    list(JOIN hydro_torch_deps ":" hydro_torch_deps)
    set(HYDRO_TORCH_LINK_OPTIONS "-Wl,-rpath-link,${hydro_torch_deps}")
  endif()
else()
  find_package(Torch REQUIRED)
endif()
# hydro's Gloo helper (join_gloo_group, runtime/torch/gloo_backend.h) compiles against the gloo
# headers this libtorch was built with and no others: those beside its own headers, in one of
# TORCH_INCLUDE_DIRS (Debian's libtorch-dev in /usr/include, with libgloo-dev, the gloo Debian
# built it with). PyPI's wheels ship none; gloo headers elsewhere on the system (Debian's, beside
# a pip torch) are another gloo, and are not used. Without them the ranks' collectives are
# hydro's over the TCPStore. Decided at each configure, from what is there then.
set(HYDRO_GLOO OFF)
foreach(dir ${TORCH_INCLUDE_DIRS})
  if(EXISTS ${dir}/gloo/algorithm.h)
    set(HYDRO_GLOO ON)
  endif()
endforeach()
if(HYDRO_GLOO)
  message(STATUS "hydro: join_gloo_group runs c10d's Gloo (this libtorch's gloo headers)")
else()
  message(STATUS "hydro: join_gloo_group runs hydro's collectives over the TCPStore (this libtorch ships no gloo headers)")
endif()

# A libtorch with CUDA sets TORCH_CUDA_LIBRARIES: then hydro's CUDA code is built (the allocator's
# release on a pause, tests/gpu), compiled and linked with the CUDA toolkit torch's CMake files find.
if(TORCH_CUDA_LIBRARIES)
  set(HYDRO_CUDA ON CACHE INTERNAL "hydro's CUDA code is built")
else()
  set(HYDRO_CUDA OFF CACHE INTERNAL "hydro's CUDA code is built")
endif()

# torch/torch.h, precompiled once (target hydro_torch_pch) for every target whose files include it:
# parsing it takes about 30 s of each such file's 31 s compile on the build machines, 9 s with the
# precompiled header. GCC takes a precompiled header only with the same -f options and -D macros it
# was made with, so it is made as position-independent code with torch's flags alone, and each
# user compiles with -fPIC. ccache cannot cache such a header (it is about 1 GB): none for it.
option(HYDRO_TORCH_PCH "Precompile torch/torch.h once for the targets that include it" ON)
function(hydro_torch_pch target)
  if(NOT HYDRO_TORCH_PCH)
    return()
  endif()
  if(NOT TARGET hydro_torch_pch)
    # Written only when its text changes: a rewrite at each configure would rebuild the target.
    file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/hydro_torch_pch.cpp CONTENT "// torch/torch.h precompiled: cmake/HydroTorch.cmake\n")
    add_library(hydro_torch_pch OBJECT ${CMAKE_BINARY_DIR}/hydro_torch_pch.cpp)
    target_link_libraries(hydro_torch_pch PRIVATE ${TORCH_LIBRARIES})
    set_target_properties(hydro_torch_pch PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_COMPILER_LAUNCHER "")
    target_precompile_headers(hydro_torch_pch PRIVATE <torch/torch.h>)
  endif()
  target_precompile_headers(${target} REUSE_FROM hydro_torch_pch)
  target_compile_options(${target} PRIVATE -fPIC)
endfunction()

# hydro_torch_target TARGET: what a target whose files include libtorch is compiled with: the
# precompiled torch/torch.h and the batches of cmake/HydroUnity.cmake.
function(hydro_torch_target target)
  hydro_torch_pch(${target})
  hydro_unity_target(${target})
endfunction()
