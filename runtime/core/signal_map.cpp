#include "hydro/signal_map.h"

#include "hydro/text.h"
#include "hydro/setting_schema.h"

#include <signal.h>

#include <cstdlib>
#include <cstring>

namespace hydro {
namespace {

// Signals the kernel or libc raise for the program's own faults and events: never a request.
bool reports_a_fault(int signo) {
  switch (signo) {
    case SIGSEGV:
    case SIGBUS:
    case SIGILL:
    case SIGFPE:
    case SIGABRT:
    case SIGTRAP:
    case SIGSYS:
    case SIGPIPE:
    case SIGCHLD:
    case SIGXCPU:
    case SIGXFSZ: return true;
    default: return false;
  }
}

struct Named {
  const char* name;
  int signo;
};
constexpr Named kSignals[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT}, {"ABRT", SIGABRT}, {"KILL", SIGKILL},
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2},   {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM},
    {"CHLD", SIGCHLD}, {"CONT", SIGCONT},   {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},
    {"TTOU", SIGTTOU}, {"URG", SIGURG},     {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ}, {"VTALRM", SIGVTALRM},
    {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"IO", SIGIO},     {"PWR", SIGPWR},   {"SYS", SIGSYS},
};

}  // namespace

const char* action_name(Action a) {
  switch (a) {
    case Action::pause: return "pause";
    case Action::resume: return "resume";
    case Action::checkpoint_exit: return "checkpoint_exit";
    case Action::checkpoint: return "checkpoint";
  }
  return "?";
}

int parse_signal(const std::string& in) {
  std::string name = in;
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  if (!name.empty() && std::strspn(name.c_str(), "0123456789") == name.size()) {
    long n = std::strtol(name.c_str(), nullptr, 10);
    return (n > 0 && n < NSIG) ? static_cast<int>(n) : 0;
  }
  for (const auto& s : kSignals)
    if (name == s.name) return s.signo;
  return 0;
}

std::string signal_name(int signo) {
  for (const auto& s : kSignals)
    if (s.signo == signo) return std::string("SIG") + s.name;
  return "signal " + std::to_string(signo);
}

SignalMap SignalMap::defaults() {
  SignalMap m;
  m.map_ = {{SIGTSTP, Action::pause},  {SIGUSR1, Action::pause},           {SIGCONT, Action::resume},
            {SIGUSR2, Action::resume}, {SIGTERM, Action::checkpoint_exit}, {SIGWINCH, Action::checkpoint}};
  return m;
}

Status SignalMap::parse(const std::string& spec, const std::string& setting, SignalMap* out) {
  SignalMap m = defaults();
  if (spec.empty()) {
    *out = m;
    return Status::OK();
  }
  for (const auto& clause : split(spec, ';')) {
    if (clause.empty()) continue;
    size_t eq = clause.find('=');
    if (eq == std::string::npos)
      return Status::invalid_argument(setting + ": '" + clause + "' is not ACTION=SIGNAL[,SIGNAL...]");
    std::string action = clause.substr(0, eq);
    Action a;
    if (action == "pause")
      a = Action::pause;
    else if (action == "resume")
      a = Action::resume;
    else if (action == "checkpoint_exit")
      a = Action::checkpoint_exit;
    else if (action == "checkpoint")
      a = Action::checkpoint;
    else
      return Status::invalid_argument(setting + ": unknown action '" + action +
                                      "' (expected pause, resume, checkpoint_exit or checkpoint)");
    for (auto it = m.map_.begin(); it != m.map_.end();) it = it->second == a ? m.map_.erase(it) : std::next(it);
    for (const auto& sig : split(clause.substr(eq + 1), ',')) {
      if (sig.empty()) continue;
      int signo = parse_signal(sig);
      if (signo == 0) return Status::invalid_argument(setting + ": unknown signal '" + sig + "'");
      if (signo == SIGKILL || signo == SIGSTOP)
        return Status::invalid_argument(setting + ": " + signal_name(signo) + " cannot be caught");
      if (reports_a_fault(signo))
        return Status::invalid_argument(
            setting + ": " + signal_name(signo) +
            " reports a fault in the program (or a broken pipe, or a child's end); it cannot "
            "ask hydro for anything");
      m.map_[signo] = a;
    }
  }
  *out = m;
  return Status::OK();
}

SignalMap SignalMap::only(std::initializer_list<Action> actions) const {
  SignalMap m;
  for (const auto& [signo, action] : map_)
    for (Action a : actions)
      if (a == action) m.map_.emplace(signo, action);
  return m;
}

namespace {

// Whether a signal that comes before a handler is in is lost (signal(7)): its default action ends
// the process without a core dump (leaving out SIGINT, SIGTERM and SIGKILL, which the user and Slurm
// end jobs with, and SIGPIPE), or discards it (SIGWINCH, SIGURG: a `hydroctl checkpoint` in a
// program's first seconds would be dropped; SIGCHLD is left out, the shells of a job wait on it).
bool lost_before_handled(int signo) {
  switch (signo) {
    case SIGWINCH:
    case SIGURG:
    case SIGHUP:
    case SIGUSR1:
    case SIGUSR2:
    case SIGALRM:
    case SIGSTKFLT:
    case SIGPOLL:
    case SIGPROF:
    case SIGVTALRM:
    case SIGPWR: return true;
    default: return signo >= SIGRTMIN && signo <= SIGRTMAX;
  }
}

}  // namespace

sigset_t SignalMap::blocked_until_handled() const {
  sigset_t set;
  sigemptyset(&set);
  for (const auto& [signo, action] : map_)
    if (action != Action::checkpoint_exit && lost_before_handled(signo)) sigaddset(&set, signo);
  return set;
}

sigset_t SignalMap::blocked_for_job(const std::string& pause, const std::string& signals) {
  sigset_t none;
  sigemptyset(&none);
  if (pause != "on") return none;
  SignalMap map = defaults();
  if (!signals.empty() && !parse(signals, env_name(Setting::signals), &map).ok()) map = defaults();
  return map.blocked_until_handled();
}

void SignalMap::hold(const sigset_t& signals) {
  for (int signo = 1; signo < NSIG; ++signo) {
    if (sigismember(&signals, signo) != 1) continue;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(signo, &ignore, nullptr);
  }
  ::sigprocmask(SIG_BLOCK, &signals, nullptr);
}

int SignalMap::signal_for(Action a) const {
  int slurms = 0;
  for (const auto& [signo, action] : map_) {
    if (action != a) continue;
    if (signo != SIGTSTP && signo != SIGCONT && signo != SIGTERM) return signo;
    if (!slurms) slurms = signo;
  }
  return slurms;
}

std::vector<int> SignalMap::signals() const {
  std::vector<int> v;
  for (const auto& entry : map_) v.push_back(entry.first);
  return v;
}

bool SignalMap::lookup(int signo, Action* out) const {
  auto it = map_.find(signo);
  if (it == map_.end()) return false;
  *out = it->second;
  return true;
}

}  // namespace hydro
