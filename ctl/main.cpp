// hydroctl: act on a running hydro job, or inspect its checkpoints. Core only, never libtorch.
//
//   hydroctl pause|resume JOBID        scancel --full --signal=USR1|USR2 JOBID (Slurm checks the owner)
//   hydroctl pause|resume --pid PID    kill(PID, SIGUSR1|SIGUSR2), for its owner or root only
//   hydroctl status DIR                the checkpoints in DIR, verified
#include <CLI/CLI.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "hydro/signal_map.h"
#include "status_table.h"

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "hydroctl: %s\n", msg.c_str());
  return 1;
}

// The real uid of a process, from /proc; -1 if it does not exist.
long owner_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (f >> key) {
    if (key == "Uid:") {
      long uid;
      f >> uid;
      return uid;
    }
    std::getline(f, key);
  }
  return -1;
}

int signal_pid(pid_t pid, int sig, const char* what) {
  long uid = owner_of(pid);
  if (uid < 0) return fail("no process " + std::to_string(pid));
  if (::getuid() != 0 && uid != static_cast<long>(::getuid()))
    return fail("process " + std::to_string(pid) + " belongs to uid " + std::to_string(uid) +
                "; only its owner or root may " + what + " it");
  if (::kill(pid, sig) != 0) return fail(std::string(what) + " " + std::to_string(pid) + ": " + std::strerror(errno));
  std::printf("hydroctl: sent %s to process %d (%s)\n", hydro::signal_name(sig).c_str(), pid, what);
  return 0;
}

int signal_job(const std::string& job, int sig, const char* what, const std::string& scancel) {
  std::string arg = "--signal=" + hydro::signal_name(sig).substr(3);
  pid_t pid = ::fork();
  if (pid == 0) {
    // --full reaches the batch shell (hydro-launch forwards it), its children and every step.
    ::execlp(scancel.c_str(), scancel.c_str(), "--full", arg.c_str(), job.c_str(), static_cast<char*>(nullptr));
    std::fprintf(stderr, "hydroctl: cannot run %s: %s\n", scancel.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail(std::string("could not ") + what + " job " + job + " (see scancel's message above)");
  std::printf("hydroctl: sent %s to job %s (%s)\n", hydro::signal_name(sig).c_str(), job.c_str(), what);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hydroctl: pause or resume a hydro training job, or list its checkpoints.", "hydroctl"};
  app.require_subcommand(1);
  std::string scancel = "scancel";
  app.add_option("--scancel", scancel, "scancel to run for a job")->capture_default_str();
  int rc = 0;
  for (const char* verb : {"pause", "resume"}) {
    auto* cmd = app.add_subcommand(verb, std::string(verb) == "pause"
                                             ? "Pause at the next operator (SIGUSR1)"
                                             : "Resume a paused job (SIGUSR2)");
    auto* target = new std::string;
    auto* pid = new int(0);
    cmd->add_option("JOBID", *target, "Slurm job id: signals its batch shell, its children and its steps");
    cmd->add_option("--pid", *pid, "A process instead of a job: only its owner or root may signal it");
    cmd->callback([=, &rc, &scancel] {
      int sig = std::string(verb) == "pause" ? SIGUSR1 : SIGUSR2;
      if (*pid > 0 && !target->empty()) rc = fail("give a JOBID or --pid, not both");
      else if (*pid > 0) rc = signal_pid(*pid, sig, verb);
      else if (!target->empty()) {
        if (target->find_first_not_of("0123456789_") != std::string::npos)
          rc = fail("JOBID '" + *target + "' is not a job id");
        else rc = signal_job(*target, sig, verb, scancel);
      } else rc = fail(std::string(verb) + ": give a JOBID or --pid PID");
    });
  }
  auto* status = app.add_subcommand("status", "List the checkpoints in DIR: step, time, size, verified or corrupt, latest");
  auto* dir = new std::string;
  status->add_option("DIR", *dir, "A checkpoint directory (HYDRO_CKPT_DIR)")->required();
  status->callback([&rc, dir] {
    bool ok = false;
    std::string table = hydro::ctl::status_table(*dir, &ok);
    std::fputs(table.c_str(), ok ? stdout : stderr);
    rc = ok ? 0 : 1;
  });
  CLI11_PARSE(app, argc, argv);
  return rc;
}
