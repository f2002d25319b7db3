// A stand-in for libcuda.so.1 with the driver's process-checkpoint calls, for the tests of
// hydro-cuda-checkpoint where no GPU and no driver are (CI). The real driver runs on a GPU machine
// only (scripts/gpu-check). It keeps the state machine the driver documents (running, locked,
// checkpointed), appends "CALL PID [ARG]" to $HYDRO_FAKE_CUDA_LOG, and fails with
// CUDA_ERROR_UNKNOWN (999) the call $HYDRO_FAKE_CUDA_FAIL names (init, lock, checkpoint, restore,
// unlock) and any call made in the wrong state with CUDA_ERROR_ILLEGAL_STATE (401).
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

enum State { running = 0, locked = 1, checkpointed = 2 };
State state = running;

int record(const char* call, int pid, long arg = -1) {
  if (const char* path = std::getenv("HYDRO_FAKE_CUDA_LOG")) {
    if (FILE* f = std::fopen(path, "a")) {
      if (arg >= 0)
        std::fprintf(f, "%s %d %ld\n", call, pid, arg);
      else
        std::fprintf(f, "%s %d\n", call, pid);
      std::fclose(f);
    }
  }
  const char* fail = std::getenv("HYDRO_FAKE_CUDA_FAIL");
  return fail && std::strcmp(fail, call) == 0 ? 999 : 0;
}

int step(const char* call, int pid, State from, State to, long arg = -1) {
  if (int r = record(call, pid, arg)) return r;
  if (state != from) return 401;
  state = to;
  return 0;
}

}  // namespace

extern "C" {

int cuInit(unsigned flags) { return record("init", 0, flags); }

int cuGetErrorName(int error, const char** name) {
  *name = error == 999 ? "CUDA_ERROR_UNKNOWN" : error == 401 ? "CUDA_ERROR_ILLEGAL_STATE" : "CUDA_ERROR_OTHER";
  return 0;
}

int cuCheckpointProcessLock(int pid, const unsigned* args) { return step("lock", pid, running, locked, *args); }
int cuCheckpointProcessCheckpoint(int pid, void*) { return step("checkpoint", pid, locked, checkpointed); }
int cuCheckpointProcessRestore(int pid, void*) { return step("restore", pid, checkpointed, locked); }
int cuCheckpointProcessUnlock(int pid, void*) { return step("unlock", pid, locked, running); }

int cuCheckpointProcessGetState(int, int* out) {
  *out = state;
  return 0;
}
}
