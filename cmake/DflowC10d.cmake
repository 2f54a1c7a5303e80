# c10d (torch.distributed's C++ engine) from the wheel's LibTorch. Its Gloo and
# NCCL process groups are compiled into libtorch_cpu / libtorch_cuda; the two
# translation units that construct them need a little more than the rest:
#  - Gloo: the wheel ships no Gloo headers, so train/gloo_backend.cpp gets the
#    declarations in cmake/gloo_decl (see its README for why that is sound);
#  - NCCL: nccl.h from the nvidia-nccl wheel beside torch (CUDA builds only).
if(DFLOW_HAVE_CUDA)
  # nvidia-nccl-cu12/-cu13 wheels: nvidia/nccl/include; some CUDA 13 layouts gather headers in nvidia/cu13/include.
  find_path(DFLOW_NCCL_INCLUDE_DIR nccl.h PATHS "${DFLOW_TORCH_SITE}/nvidia/nccl/include"
            "${DFLOW_TORCH_SITE}/nvidia/cu13/include" NO_DEFAULT_PATH)
endif()
if(DFLOW_NCCL_INCLUDE_DIR)
  message(STATUS "dflow: c10d NCCL with ${DFLOW_NCCL_INCLUDE_DIR}/nccl.h")
else()
  message(STATUS "dflow: c10d without NCCL (Gloo only)")
endif()

function(dflow_c10d_sources dir)
  set_source_files_properties(${dir}/gloo_backend.cpp PROPERTIES
    INCLUDE_DIRECTORIES "${CMAKE_SOURCE_DIR}/cmake/gloo_decl")
  if(DFLOW_NCCL_INCLUDE_DIR)
    # A system header, as LibTorch's: its warnings are not dflow's (DFLOW_WERROR).
    set_source_files_properties(${dir}/nccl_backend.cpp PROPERTIES
      COMPILE_OPTIONS "-isystem;${DFLOW_NCCL_INCLUDE_DIR}" COMPILE_DEFINITIONS DFLOW_HAVE_NCCL=1)
  endif()
endfunction()

# torchrun beside the Python that gave CMAKE_PREFIX_PATH (tests launch with
# it; they skip, saying why, when it is absent).
get_filename_component(DFLOW_TORCH_PREFIX "${DFLOW_TORCH_SITE}/../../.." ABSOLUTE)
find_program(DFLOW_TORCHRUN torchrun PATHS "${DFLOW_TORCH_PREFIX}/bin" NO_DEFAULT_PATH)
if(NOT DFLOW_TORCHRUN)
  set(DFLOW_TORCHRUN "")
endif()
message(STATUS "dflow: torchrun for tests: ${DFLOW_TORCHRUN}")
