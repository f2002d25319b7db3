// hydroctl: act on a running hydro job, or inspect its checkpoints. Core only, never libtorch.
//
//   hydroctl pause|resume|checkpoint JOBID      scancel --signal=USR1|USR2|WINCH JOBID (every step),
//                                               then the same with --batch (the batch shell)
//   hydroctl pause|resume|checkpoint --pid PID  pidfd_send_signal(pidfd_open(PID), ...)
//   hydroctl status DIR|JOBID                   the checkpoints, verified
// The verbs send what the job's signal map names for them (SignalMap::signal_for; USR1, USR2 and
// WINCH by default): see signal_map_of.
// Only the owner of the job or process, or root, may act: hydroctl refuses anyone else itself,
// before Slurm or the kernel would.
#include <CLI/CLI.hpp>
#include <pwd.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "hydro/signal_map.h"
#include "hydro/setting_schema.h"
#include "hydro/subprocess.h"
#include "hydro/version.h"
#include "job_lookup.h"
#include "admin_config.h"
#include "status_table.h"

namespace {

using hydro::env_name;
using hydro::Setting;

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

struct Tools {
  std::string scancel = "scancel";
  std::string scontrol = "scontrol";
  std::string config = "/etc/hydro/hydro.yaml";
  std::string signals;  // --signals
};

// A process's own HYDRO_SIGNALS ("" when it has none), from /proc/PID/environ, which only its
// owner and root can read; false when it cannot be read.
bool process_signals(pid_t pid, std::string* spec) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/environ");
  if (!f) return false;
  spec->clear();
  for (std::string var; std::getline(f, var, '\0');)
    if (var.rfind("HYDRO_SIGNALS=", 0) == 0) *spec = var.substr(14);
  return true;
}

// The signal that asks for `a`, from the job's signal map: --signals; else, for a process, its own
// HYDRO_SIGNALS (`process`, read by process_signals; null if it could not be), which its runtime
// follows; else hydroctl's $HYDRO_SIGNALS (a job inherits its submitter's); else the admin's
// `signals:` in --config, if that file exists; else the defaults. Returns hydroctl's exit code.
int signal_map_of(const Tools& t, hydro::Action a, const std::string* process, int* sig) {
  std::string spec, from = "the default signal map";
  if (!t.signals.empty()) {
    spec = t.signals, from = "--signals";
  } else if (process) {
    spec = *process, from = "the process's HYDRO_SIGNALS";
  } else if (const char* env = std::getenv(env_name(Setting::signals))) {
    spec = env, from = env_name(Setting::signals);
  } else if (::access(t.config.c_str(), F_OK) == 0) {
    hydro::admin::JobSettings s;
    hydro::Status st = hydro::admin::PluginConfig::load_yaml(t.config, &s);
    if (!st.ok()) return fail(st.message());
    if (auto v = s.get("signals")) spec = *v, from = t.config + ": signals";
  }
  hydro::SignalMap map;
  hydro::Status st = hydro::SignalMap::parse(spec, from, &map);
  if (!st.ok()) return fail(st.message());
  *sig = map.signal_for(a);
  if (*sig == 0) return fail(from + " gives " + hydro::action_name(a) + " no signal");
  return 0;
}

// glibc 2.36's <sys/pidfd.h> declares these without extern "C": call the kernel directly.
int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_signal(int fd, int sig) { return static_cast<int>(::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0)); }

// Through a pidfd: it names the process that was there when it was opened, so the owner read
// from /proc and the signal are of the same process, even if the pid is reused in between (a
// plain check-then-kill could signal whatever process took the pid meanwhile).
int signal_pid(const Tools& t, pid_t pid, hydro::Action action, const char* what) {
  const std::string p = std::to_string(pid);
  int fd = pidfd_open(pid);
  if (fd < 0) return fail(errno == ESRCH ? "no process " + p : "pidfd_open " + p + ": " + std::strerror(errno));
  long uid = owner_of(pid);
  std::string spec;
  const bool readable = process_signals(pid, &spec);
  // Still alive now: the /proc entries read above were this process's, not a successor's.
  if (uid < 0 || (pidfd_signal(fd, 0) != 0 && errno == ESRCH)) {
    ::close(fd);
    return fail("no process " + p);
  }
  if (::getuid() != 0 && uid != static_cast<long>(::getuid())) {
    ::close(fd);
    return fail("process " + p + " belongs to uid " + std::to_string(uid) + "; only its owner or root may " + what +
                " it");
  }
  int sig = 0;
  if (int refused = signal_map_of(t, action, readable ? &spec : nullptr, &sig)) {
    ::close(fd);
    return refused;
  }
  int rc = pidfd_signal(fd, sig);
  int err = errno;
  ::close(fd);
  if (rc != 0) return fail(std::string(what) + " " + p + ": " + std::strerror(err));
  std::printf("hydroctl: sent %s to process %d (%s)\n", hydro::signal_name(sig).c_str(), pid, what);
  return 0;
}

int check_owner(const Tools& t, const std::string& job, const char* what, hydro::ctl::JobOwner* owner) {
  hydro::Status st = hydro::ctl::job_owner(t.scontrol, job, owner);
  if (!st.ok()) return fail(st.message());
  if (::getuid() != 0 && owner->uid != ::getuid())
    return fail("job " + job + " belongs to " + owner->user + " (uid " + std::to_string(owner->uid) +
                "); only its owner or root may " + what + " it");
  return 0;
}

int signal_job(const Tools& t, const std::string& job, hydro::Action action, const char* what) {
  hydro::ctl::JobOwner owner;
  if (int rc = check_owner(t, job, what, &owner)) return rc;
  int sig = 0;
  if (int rc = signal_map_of(t, action, nullptr, &sig)) return rc;
  // By number: scancel knows few names (not WINCH).
  std::string arg = "--signal=" + std::to_string(sig);
  std::string ignored;
  // Every step (`srun hydro-launch ...` on each node), then the batch shell (a batch script that is
  // hydro-launch forwards it). Slurm 22.05's --full reaches the batch step alone, and srun forwards
  // only some signals to its step (USR1 and USR2, not WINCH): measured in multinode.sh.
  for (const auto& argv : {std::vector<std::string>{t.scancel, arg, job}, {t.scancel, "--batch", arg, job}}) {
    if (hydro::run_capture(argv, &ignored) != 0)
      return fail(std::string("could not ") + what + " job " + job + " (see scancel's message above)");
  }
  std::printf("hydroctl: sent %s to job %s (%s)\n", hydro::signal_name(sig).c_str(), job.c_str(), what);
  return 0;
}

// The job's checkpoint directory from the admin's template (the YAML's checkpoint_dir).
int job_dir(const Tools& t, const std::string& job, std::string* dir) {
  hydro::ctl::JobOwner owner;
  if (int rc = check_owner(t, job, "inspect", &owner)) return rc;
  hydro::admin::JobSettings s;
  hydro::Status st = hydro::admin::PluginConfig::load_yaml(t.config, &s);
  if (!st.ok()) return fail(st.message());
  if (!s.has("checkpoint_dir"))
    return fail(t.config + " has no checkpoint_dir; give the job's checkpoint directory instead of its id");
  st = hydro::admin::expand_template(*s.get("checkpoint_dir"), owner.user, owner.uid,
                                     static_cast<unsigned>(std::stoul(job)), dir);
  if (!st.ok()) return fail(t.config + ": checkpoint_dir: " + st.message());
  return 0;
}

bool is_job_id(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() < 10;
}

// The common options: where the Slurm tools and the admin's config are, and the signal map.
void add_tool_options(CLI::App& app, Tools& tools) {
  app.add_option("--scancel", tools.scancel, "scancel to run for a job")->capture_default_str();
  app.add_option("--scontrol", tools.scontrol, "scontrol to ask for a job's owner")->capture_default_str();
  app.add_option("--config", tools.config,
                 "The admin's hydro YAML: its checkpoint_dir for `status JOBID`, its signals for the verbs")
      ->capture_default_str();
  app.add_option("--signals", tools.signals,
                 "The job's signal map, as HYDRO_SIGNALS (default: for --pid the process's own HYDRO_SIGNALS, "
                 "else $HYDRO_SIGNALS, else the signals of --config, else pause=USR1, resume=USR2, checkpoint=WINCH)");
}

struct Verb {
  const char* name;
  hydro::Action action;
  const char* help;
};

// pause, resume, checkpoint: the map's signal to a job (JOBID) or to one process (--pid).
void add_verb(CLI::App& app, Tools& tools, const Verb& verb, int& rc) {
  auto* cmd = app.add_subcommand(verb.name, verb.help);
  // The options' values live as long as the callback that reads them (CLI11 keeps it in `cmd`).
  auto target = std::make_shared<std::string>();
  auto pid = std::make_shared<int>(0);
  cmd->add_option("JOBID", *target, "Slurm job id: signals its batch shell, its children and its steps");
  cmd->add_option("--pid", *pid, "A process instead of a job");
  cmd->callback([=, &rc, &tools] {
    if (*pid > 0 && !target->empty())
      rc = fail("give a JOBID or --pid, not both");
    else if (*pid > 0)
      rc = signal_pid(tools, *pid, verb.action, verb.name);
    else if (!target->empty()) {
      if (target->find_first_not_of("0123456789_") != std::string::npos)
        rc = fail("JOBID '" + *target + "' is not a job id");
      else
        rc = signal_job(tools, *target, verb.action, verb.name);
    } else
      rc = fail(std::string(verb.name) + ": give a JOBID or --pid PID");
  });
}

// status DIR|JOBID: the table of a checkpoint directory's checkpoints, each verified.
void add_status(CLI::App& app, Tools& tools, int& rc) {
  auto* status =
      app.add_subcommand("status",
                         "List a job's checkpoints: step, time, size, verified or corrupt, latest. DIR is a checkpoint "
                         "directory; JOBID finds it from the admin's checkpoint_dir template in --config");
  auto target = std::make_shared<std::string>();
  status->add_option("DIR|JOBID", *target, "A checkpoint directory (HYDRO_CKPT_DIR) or a job id")->required();
  status->callback([&rc, &tools, target] {
    std::string dir = *target;
    if (is_job_id(dir)) {
      if ((rc = job_dir(tools, *target, &dir))) return;
      std::printf("job %s: %s\n", target->c_str(), dir.c_str());
    }
    bool ok = false;
    std::string table = hydro::ctl::status_table(dir, &ok);
    std::fputs(table.c_str(), ok ? stdout : stderr);
    rc = ok ? 0 : 1;
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hydroctl: pause, resume or checkpoint a hydro training job, or list its checkpoints. "
      "Only the job's owner or root may act on it.",
      "hydroctl"};
  app.set_version_flag("--version", std::string("hydroctl ") + hydro::version());
  app.require_subcommand(1);
  Tools tools;
  add_tool_options(app, tools);
  int rc = 0;
  static const Verb verbs[] = {
      {"pause", hydro::Action::pause, "Pause at the next operator (the map's pause signal, SIGUSR1 by default)"},
      {"resume", hydro::Action::resume, "Resume a paused job (the map's resume signal, SIGUSR2 by default)"},
      {"checkpoint", hydro::Action::checkpoint,
       "Checkpoint at the end of the current step and go on (the map's checkpoint signal, SIGWINCH by default)"},
  };
  for (const auto& verb : verbs) add_verb(app, tools, verb, rc);
  add_status(app, tools, rc);
  CLI11_PARSE(app, argc, argv);
  return rc;
}
