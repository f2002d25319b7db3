// Which signal asks the runtime for what. Admins can move off SIGUSR1 (NCCL owns it).
#pragma once

#include <signal.h>

#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "hydro/status.h"

namespace hydro {

enum class Action {
  pause,            // block at the next operator or step boundary
  resume,           // release a pause
  checkpoint_exit,  // checkpoint at the end of this step, then exit with kExitRequeue
  checkpoint,       // checkpoint at the end of this step and go on training
};

const char* action_name(Action a);

// "USR1", "SIGUSR1" or "10" -> 10. Returns 0 for an unknown name.
int parse_signal(const std::string& name);
// 10 -> "SIGUSR1".
std::string signal_name(int signo);

class SignalMap {
 public:
  // SIGTSTP and SIGUSR1 pause; SIGCONT and SIGUSR2 resume; SIGTERM checkpoints and exits;
  // SIGWINCH checkpoints and goes on (its default action is to ignore it, so sending it to a
  // program without hydro, or to a batch shell, is harmless).
  static SignalMap defaults();
  // "pause=TSTP,USR1;resume=CONT,USR2;checkpoint_exit=TERM;checkpoint=WINCH": each action named replaces its
  // default signals. `setting` names the source in errors (e.g. the HYDRO_SIGNALS variable).
  static Status parse(const std::string& spec, const std::string& setting, SignalMap* out);

  const std::map<int, Action>& entries() const { return map_; }
  // This map with only the signals of the given actions.
  SignalMap only(std::initializer_list<Action> actions) const;
  bool lookup(int signo, Action* out) const;
  // The signal that a sender (hydroctl's verbs, hydro-launch's own checkpoint-and-exit) uses to ask
  // for `a`: the lowest of the action's signals that Slurm does not send itself on suspend, resume
  // and requeue (SIGTSTP, SIGCONT, SIGTERM), else the lowest of those; 0 if the action has none.
  int signal_for(Action a) const;
  // Every signal of this map, lowest first.
  std::vector<int> signals() const;

  // The signals of this map that ask for a pause, a resume or a checkpoint and that would end a
  // process with no handler for them (SIGUSR1, SIGUSR2, ...) or be discarded by it (SIGWINCH,
  // SIGURG). A process of a --hydro-pause=on job starts with them blocked (the SPANK plugin, per
  // task; hydro-launch, for its program), and SignalBridge::start unblocks them once its handlers
  // are in: a request that comes early, such as `hydroctl pause` or `hydroctl checkpoint` in a job's
  // first second, waits instead of killing the program or being dropped, and the job's other
  // processes (the batch shell, a `tee`) never die of it. Never SIGTERM nor SIGINT.
  sigset_t blocked_until_handled() const;
  // The same for a job's settings: empty unless HYDRO_PAUSE is "on"; a bad HYDRO_SIGNALS gives the
  // defaults' (the runtime will refuse it, naming it). What the plugin and hydro-launch hold.
  static sigset_t blocked_for_job(const std::string& pause, const std::string& signals);
  // Applies such a set to this process before it execs the job's program: blocked, so that one
  // that comes early stays pending until SignalBridge::start unblocks it; and ignored, for the
  // programs that clear their mask at start (dash, so `sbatch --wrap`): there it is dropped, not
  // fatal. (Linux queues a blocked signal even when it is ignored, so the first holds.)
  static void hold(const sigset_t& signals);

 private:
  std::map<int, Action> map_;
};

}  // namespace hydro
