# Several files of a target compiled as one (CMake's unity build, batches of HYDRO_UNITY files):
# the inline templates that each file instantiates (libtorch's, nlohmann-json's, yaml-cpp's) are
# then compiled once a batch, not once a file. On the 2-CPU VM, cold, ccache off: the oldest tier's
# whole build took 537 s of CPU in batches of 8 against 801 s one by one; the libraries without
# libtorch 79 s against 155 s (docs/design.md). 1 compiles each file alone, as a change to one
# file then recompiles that file only. The files of a target share no names in their anonymous
# namespaces, as a batch needs.
set(HYDRO_UNITY 8 CACHE STRING "Files of a library compiled as one (1: each alone)")
if(NOT HYDRO_UNITY MATCHES "^[1-9][0-9]*$")
  message(FATAL_ERROR "HYDRO_UNITY must be a count of files (1: each alone), not '${HYDRO_UNITY}'")
endif()

# hydro_unity_target TARGET: TARGET's files compiled in the batches above.
function(hydro_unity_target target)
  if(HYDRO_UNITY GREATER 1)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${HYDRO_UNITY})
  endif()
endfunction()
