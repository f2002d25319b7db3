# Finds what the Python binding needs: the interpreter HYDRO_PYTHON with torch importable, its
# headers, and pybind11. Sets HYDRO_WITH_PYTHON and adds python/ when all are there.
set(HYDRO_WITH_PYTHON OFF)
# FindPython's `Python` (not `Python3`): a newer libtorch's CMake files find `Python` (its
# interpreter alone) before this, and pybind11 then builds with the `Python` that was found.
set(Python_EXECUTABLE ${HYDRO_PYTHON})
find_package(Python COMPONENTS Interpreter Development.Module)
set(why "")
if(NOT Python_FOUND)
  set(why "no Python 3 interpreter with headers at ${HYDRO_PYTHON} (Debian: python3-dev)")
else()
  # PYTHONPATH unset: see cmake/HydroTorch.cmake (pip's isolated build hides the environment's torch).
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH ${Python_EXECUTABLE} -c "import torch; print(torch.__version__)"
                  RESULT_VARIABLE torch_rc OUTPUT_VARIABLE py_torch_version ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT torch_rc EQUAL 0)
    set(why "${Python_EXECUTABLE} cannot import torch (Debian: python3-torch)")
  else()
    # One libtorch in the process: the binding must link the one Python's torch loads.
    string(REGEX MATCH "^[0-9]+\\.[0-9]+\\.[0-9]+" py_torch_release "${py_torch_version}")
    # The interpreter's own pybind11 (pip's) first, else the system's (Debian: pybind11-dev).
    execute_process(COMMAND ${Python_EXECUTABLE} -c "import pybind11; print(pybind11.get_cmake_dir())"
                    OUTPUT_VARIABLE py_pybind11_dir ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    find_package(pybind11 CONFIG HINTS ${py_pybind11_dir})
    if(NOT py_torch_release VERSION_EQUAL Torch_VERSION)
      set(why "${Python_EXECUTABLE} has torch ${py_torch_version} but hydro is built against libtorch ${Torch_VERSION}: pass -DCMAKE_PREFIX_PATH=$(python -c 'import torch; print(torch.utils.cmake_prefix_path)') with that python's torch")
    elseif(NOT pybind11_FOUND)
      set(why "pybind11 not found (Debian: pybind11-dev)")
    endif()
  endif()
endif()
if(why)
  if(HYDRO_BUILD_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "hydro: HYDRO_BUILD_PYTHON=ON but ${why}")
  endif()
  message(WARNING "hydro: the Python binding is not built: ${why}")
else()
  message(STATUS "hydro: Python binding for ${Python_EXECUTABLE} (torch ${py_torch_version}, libtorch ${Torch_VERSION})")
  set(HYDRO_WITH_PYTHON ON)
  add_subdirectory(python)
endif()
