// The client of hydro-cuda-checkpoint (runtime/cuda_checkpoint/main.cpp): the helper process
// that makes the CUDA driver's process-checkpoint calls for this process (HYDRO_GPU_RELEASE=full,
// hydro/gpu_release.h). The driver meant those calls for a controller outside the process: a
// locked process's own CUDA calls block. Core only: a socket to the helper, no CUDA here.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

#include "hydro/status.h"

namespace hydro {

class CudaCheckpointHelper {
 public:
  // Starts `helper` for process `target` (this one by default), with no signal blocked, and
  // waits for it to load the driver. `libcuda` replaces libcuda.so.1 (the tests' fake driver).
  static Status start(const std::string& helper, pid_t target, const std::string& libcuda,
                      std::unique_ptr<CudaCheckpointHelper>* out);
  ~CudaCheckpointHelper();  // ends the helper: it exits at the end of its input
  CudaCheckpointHelper(const CudaCheckpointHelper&) = delete;
  CudaCheckpointHelper& operator=(const CudaCheckpointHelper&) = delete;

  Status lock(std::chrono::milliseconds timeout);
  Status checkpoint();
  Status restore();
  Status unlock();
  // "running", "locked", "checkpointed" or "failed".
  Status state(std::string* out);
  pid_t pid() const { return pid_; }

 private:
  CudaCheckpointHelper(int fd, pid_t pid) : fd_(fd), pid_(pid) {}
  // Sends `command`, reads its one answer line: "ok[ REST]" gives REST, "error WHY" a Status.
  Status ask(const std::string& command, std::string* rest = nullptr);
  Status read_line(std::string* line);

  int fd_;
  pid_t pid_;
  std::string buffered_;
};

// The helper beside the library that holds this code (libhydro.so: the build tree's runtime/ and a
// wheel's hydro/ keep it there), else in the install's libexec/hydro. "" if neither has it.
std::string find_cuda_checkpoint_helper();

}  // namespace hydro
