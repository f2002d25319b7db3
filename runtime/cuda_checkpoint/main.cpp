// hydro-cuda-checkpoint: the process that makes the CUDA driver's process-checkpoint calls
// (cuCheckpointProcessLock, Checkpoint, Restore, Unlock) for one training process, the one that
// started it (issue 33, HYDRO_GPU_RELEASE=full). The driver meant these calls for a controller
// outside the process: a locked process's own CUDA calls block. It loads libcuda.so.1 at run
// time (never linked: a machine without the driver gets a clear error, not a failed start) and
// creates no CUDA context, so it holds no device memory.
//
//   hydro-cuda-checkpoint --pid PID [--libcuda PATH]
//
// Lines on stdin, one answer line each on stdout ("ok ..." or "error ..."): `lock MS`,
// `checkpoint`, `restore`, `unlock`, `state`. It says "ready" once the driver is loaded, and exits
// at end of input. HYDRO_CUDA_CHECKPOINT_FAIL=COMMAND makes that command fail without calling the
// driver (the GPU check's failed checkpoint). It ignores the job's signals (Slurm sends SIGTSTP,
// SIGTERM and the pause signals to every process of a step): only the training process decides
// when it moves.
#include <dlfcn.h>
#include <signal.h>
#include <sys/prctl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

#include <cuda.h>

namespace {

struct Driver {
  decltype(&cuInit) init = nullptr;
  decltype(&cuGetErrorName) error_name = nullptr;
  decltype(&cuCheckpointProcessLock) lock = nullptr;
  decltype(&cuCheckpointProcessCheckpoint) checkpoint = nullptr;
  decltype(&cuCheckpointProcessRestore) restore = nullptr;
  decltype(&cuCheckpointProcessUnlock) unlock = nullptr;
  decltype(&cuCheckpointProcessGetState) get_state = nullptr;
};

template <typename F>
bool bind(void* lib, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(::dlsym(lib, name));
  if (!*out) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *out != nullptr;
}

// The driver's entry points, or an error naming what is missing (a driver older than 570 has no
// checkpoint calls).
std::string load(const std::string& path, Driver* d) {
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return "cannot load the CUDA driver " + path + ": " + ::dlerror();
  std::string missing;
  bind(lib, "cuInit", &d->init, &missing);
  bind(lib, "cuGetErrorName", &d->error_name, &missing);
  bind(lib, "cuCheckpointProcessLock", &d->lock, &missing);
  bind(lib, "cuCheckpointProcessCheckpoint", &d->checkpoint, &missing);
  bind(lib, "cuCheckpointProcessRestore", &d->restore, &missing);
  bind(lib, "cuCheckpointProcessUnlock", &d->unlock, &missing);
  bind(lib, "cuCheckpointProcessGetState", &d->get_state, &missing);
  if (!missing.empty()) return path + " has no " + missing + " (the process checkpoint needs driver 570 or later)";
  return "";
}

std::string answer(const Driver& d, CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return "ok";
  const char* name = nullptr;
  if (d.error_name(r, &name) != CUDA_SUCCESS || !name) name = "unknown error";
  return std::string("error ") + call + ": " + name + " (" + std::to_string(static_cast<int>(r)) + ")";
}

const char* state_name(CUprocessState s) {
  switch (s) {
    case CU_PROCESS_STATE_RUNNING: return "running";
    case CU_PROCESS_STATE_LOCKED: return "locked";
    case CU_PROCESS_STATE_CHECKPOINTED: return "checkpointed";
    case CU_PROCESS_STATE_FAILED: return "failed";
  }
  return "unknown";
}

std::string run(const Driver& d, int pid, const std::string& line) {
  std::istringstream in(line);
  std::string command;
  in >> command;
  const char* fail = std::getenv("HYDRO_CUDA_CHECKPOINT_FAIL");  // the GPU check's failure, on purpose
  if (fail && command == fail) return "error " + command + ": failed on purpose (HYDRO_CUDA_CHECKPOINT_FAIL)";
  if (command == "lock") {
    unsigned ms = 0;
    if (!(in >> ms)) return "error lock: needs a timeout in milliseconds";
    CUcheckpointLockArgs args{};
    args.timeoutMs = ms;
    return answer(d, d.lock(pid, &args), "cuCheckpointProcessLock");
  }
  if (command == "checkpoint") {
    CUcheckpointCheckpointArgs args{};
    return answer(d, d.checkpoint(pid, &args), "cuCheckpointProcessCheckpoint");
  }
  if (command == "restore") {
    CUcheckpointRestoreArgs args{};
    return answer(d, d.restore(pid, &args), "cuCheckpointProcessRestore");
  }
  if (command == "unlock") {
    CUcheckpointUnlockArgs args{};
    return answer(d, d.unlock(pid, &args), "cuCheckpointProcessUnlock");
  }
  if (command == "state") {
    CUprocessState s = CU_PROCESS_STATE_RUNNING;
    const std::string a = answer(d, d.get_state(pid, &s), "cuCheckpointProcessGetState");
    return a == "ok" ? a + " " + state_name(s) : a;
  }
  return "error unknown command '" + command + "' (lock MS, checkpoint, restore, unlock, state)";
}

// Every signal a job's processes are sent, but those that cannot be ignored and the faults.
void ignore_the_jobs_signals() {
  for (int s = 1; s < 32; ++s) {
    if (s == SIGKILL || s == SIGSTOP || s == SIGSEGV || s == SIGBUS || s == SIGFPE || s == SIGILL || s == SIGABRT ||
        s == SIGCHLD || s == SIGTRAP || s == SIGSYS)
      continue;
    ::signal(s, SIG_IGN);
  }
}

constexpr const char* kUsage =
    "usage: hydro-cuda-checkpoint --pid PID [--libcuda PATH]\n"
    "The CUDA driver's process checkpoint for process PID, started by hydro's runtime (HYDRO_GPU_RELEASE=full).\n"
    "Reads `lock MS`, `checkpoint`, `restore`, `unlock` or `state`, one a line, and answers each.\n";

int usage(const std::string& why) {
  std::fprintf(stderr, "hydro-cuda-checkpoint: %s\n%s", why.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int pid = 0;
  std::string libcuda = "libcuda.so.1";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return usage("missing the value of " + a);
    if (a == "--pid")
      pid = std::atoi(argv[++i]);
    else if (a == "--libcuda")
      libcuda = argv[++i];
    else
      return usage("unknown argument " + a);
  }
  if (pid <= 0) return usage("--pid needs a process id");
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ignore_the_jobs_signals();
  Driver d;
  std::string err = load(libcuda, &d);
  if (!err.empty()) err = "error " + err;
  if (err.empty()) err = answer(d, d.init(0), "cuInit");  // "ok" or "error cuInit: ..."
  std::cout << (err == "ok" ? "ready" : err) << std::endl;
  if (err != "ok") return 1;
  for (std::string line; std::getline(std::cin, line);) std::cout << run(d, pid, line) << std::endl;
  return 0;
}
