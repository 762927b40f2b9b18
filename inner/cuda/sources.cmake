# The sources of the CUDA backend, in one place for its two builds: by nvcc
# (inner/cuda/CMakeLists.txt) and by the host compiler against the CUDA
# emulator (inner/cuda/emulator/CMakeLists.txt). Paths are relative to inner/cuda/.
set(GEOLOCO_INNER_CUDA_HOST_SOURCES
  check.cpp
  device.cpp
  blas.cpp
  matmul.cpp
  device_model.cpp
  mlp_runner.cpp
  gpt_runner.cpp
  cuda_model.cpp
  device_trainer.cpp
  nccl_collective.cpp)
set(GEOLOCO_INNER_CUDA_KERNEL_SOURCES
  activations.cu
  bias.cu
  residual.cu
  layernorm.cu
  attention.cu
  embedding.cu
  cross_entropy.cu
  clip.cu
  adamw.cu)
set(GEOLOCO_INNER_CUDA_TEST_SOURCES
  tests/cuda_ops_test.cpp
  tests/cuda_runners_test.cpp
  tests/device_trainer_test.cpp)
# Its own program: the parent must not touch CUDA before forking the ranks.
set(GEOLOCO_INNER_CUDA_DATA_PARALLEL_TEST_SOURCES
  tests/device_data_parallel_test.cpp)
