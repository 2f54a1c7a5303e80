# LibTorch from the PyPI torch wheel (CMAKE_PREFIX_PATH = torch.utils.cmake_prefix_path).
# The CUDA build of the wheel needs the CUDA toolkit to configure; its NVIDIA
# runtime libraries live beside torch in site-packages/nvidia/*/lib, which the
# linker must search (-rpath-link) and the binaries must find at run time.
# dflow compiles no .cu files itself; naming the arch list skips torch's GPU
# detection (a try_run that fails with C++20 on machines without a GPU).
if(NOT DEFINED TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST "9.0")
endif()
find_package(Torch REQUIRED)
# Any LibTorch 2.11 .. 2.15 (the GPU machine's wheel is 2.11 with CUDA 13,
# tools/setup.sh pins 2.15.0 here); others are refused before a long build.
set(DFLOW_TORCH_MIN_VERSION 2.11)
set(DFLOW_TORCH_MAX_MINOR 15)
string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" _dflow_torch_mm "${Torch_VERSION}")
if(NOT _dflow_torch_mm OR Torch_VERSION VERSION_LESS DFLOW_TORCH_MIN_VERSION
   OR NOT CMAKE_MATCH_1 EQUAL 2 OR CMAKE_MATCH_2 GREATER DFLOW_TORCH_MAX_MINOR)
  message(FATAL_ERROR "dflow builds against LibTorch 2.11 .. 2.15; found '${Torch_VERSION}' at ${Torch_DIR} "
                      "(set CMAKE_PREFIX_PATH to another torch.utils.cmake_prefix_path)")
endif()
get_filename_component(DFLOW_TORCH_SITE "${Torch_DIR}/../../../.." ABSOLUTE)
file(GLOB DFLOW_NVIDIA_LIB_DIRS "${DFLOW_TORCH_SITE}/nvidia/*/lib")
set(DFLOW_TORCH_LIB_DIR "${DFLOW_TORCH_SITE}/torch/lib")

if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(DFLOW_HAVE_CUDA ON)
else()
  set(DFLOW_HAVE_CUDA OFF)
endif()
message(STATUS "dflow: LibTorch ${Torch_VERSION} at ${DFLOW_TORCH_LIB_DIR}, CUDA build: ${DFLOW_HAVE_CUDA}")

add_library(dflow_torch INTERFACE)
target_link_libraries(dflow_torch INTERFACE ${TORCH_LIBRARIES})
foreach(dir ${DFLOW_NVIDIA_LIB_DIRS})
  target_link_options(dflow_torch INTERFACE "-Wl,-rpath-link,${dir}")
endforeach()
if(DFLOW_HAVE_CUDA)
  target_compile_definitions(dflow_torch INTERFACE DFLOW_HAVE_CUDA=1)
endif()
set(CMAKE_BUILD_RPATH "${DFLOW_TORCH_LIB_DIR};${DFLOW_NVIDIA_LIB_DIRS}")

# One precompiled <torch/torch.h> shared by every target that includes torch.
add_library(dflow_torch_pch STATIC ${CMAKE_SOURCE_DIR}/cmake/pch_anchor.cpp)
target_link_libraries(dflow_torch_pch PUBLIC dflow_torch)
target_precompile_headers(dflow_torch_pch PRIVATE <torch/torch.h>)

function(dflow_use_torch target)
  target_link_libraries(${target} PUBLIC dflow_torch)
  target_precompile_headers(${target} REUSE_FROM dflow_torch_pch)
endfunction()
