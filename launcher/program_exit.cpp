#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <string>

#include "hydro/exit_codes.h"
#include "hydro/signal_map.h"
#include "process_info.h"
#include "supervisor_loop.h"

namespace hydro::launcher {

// What the runtime said. Up releases a held checkpoint-and-exit; a closed runtime, or a pipe that
// ended with none, answers it without one.
void Supervisor::on_runtime_pipe() {
  const RuntimePipe::State before = runtime_state();
  pipe_.read_available();
  read_reports();
  const RuntimePipe::State now = runtime_state();
  if (now == before) return;
  if (now == RuntimePipe::State::closed)
    say("the program's hydro runtime closed (its training is over): no checkpoint-and-exit is asked of it from now on");
  if (!awaiting_ready_ || now == RuntimePipe::State::starting) return;
  awaiting_ready_ = false;
  if (!exit_held_) return;
  exit_held_ = false;
  if (now == RuntimePipe::State::up) {
    say("the program's hydro runtime is up: asking it to checkpoint and exit (" + signal_name(exit_signal_) +
        "), then requeueing the job");
    send_exit();
  } else if (now == RuntimePipe::State::no_runtime) {
    say("the program closed its readiness pipe without a hydro runtime: asking it to exit (SIGTERM)");
    ::kill(child_, SIGTERM);
  }
}

// What the program's runtime said on the pipe, or where the pipe did not reach it (a launcher in
// between that closed it), what its workers said on the report socket.
RuntimePipe::State Supervisor::runtime_state() const {
  const RuntimePipe::State pipe = pipe_.state();
  if (program_trains()) return pipe;
  const RuntimePipe::State workers = reports_.state();
  return workers == RuntimePipe::State::starting ? pipe : workers;
}

// The program's own runtime said up or closed on the pipe: it is the training process itself, not
// a launcher of workers (torchrun) that closed the pipe before them.
bool Supervisor::program_trains() const {
  const RuntimePipe::State own = pipe_.state();
  return own == RuntimePipe::State::up || own == RuntimePipe::State::closed;
}

// A worker that comes up while the program is paused (a pause that came before torchrun had
// started it) takes that pause now: the signal reached only the processes there were.
void Supervisor::read_reports() {
  const std::string dropped = reports_.read_available([this](pid_t p) { return in_tree(p, child_); });
  if (!dropped.empty()) say(dropped);
  for (pid_t worker : reports_.take_new_up()) {
    if (!held_pause_) continue;
    say("worker pid " + std::to_string(worker) + " came up during a pause: sending it " + signal_name(held_pause_));
    ::kill(worker, held_pause_);
  }
  stop_launcher_once_workers_exit();
}

// Once every worker that said up has checkpointed to exit (the checkpoint-and-exit, or SIGTERM,
// went to them alone), their launcher gets SIGTERM: torchrun with --max-restarts above 0 would
// start them again in place, training on from that checkpoint instead of the job's requeue. Their
// checkpoint is committed and their runtimes ignore SIGTERM by then, so torchrun's SIGTERM to
// them (and its SIGKILL 30 s later) costs nothing; it stops restarting them, and ends.
void Supervisor::stop_launcher_once_workers_exit() {
  if (launcher_stopped_ || !(exit_sent_ || terminating_) || program_trains()) return;
  const int up = reports_.up();
  if (up == 0 || reports_.exiting() < up) return;
  launcher_stopped_ = true;
  say("every worker of the program (" + std::to_string(up) + ") checkpointed to exit: SIGTERM to pid " +
      std::to_string(child_) + ", their launcher, so that it does not start them again (torchrun's --max-restarts)");
  ::kill(child_, SIGTERM);
}

void Supervisor::on_ready_deadline() {
  say("the program did not say its hydro runtime is up within " + std::to_string(kReadyWaitSeconds) +
      " s of its start: asking it to checkpoint and exit (" + signal_name(exit_signal_) + ") anyway");
  send_exit();
  exit_held_ = false;
  awaiting_ready_ = false;
}

// Asks the program to checkpoint and exit, or holds that until its runtime is up. Not once the
// runtime has closed: its training is over, and the signal would only cut its teardown short.
void Supervisor::ask_exit(const std::string& why) {
  on_runtime_pipe();  // what the program said last, read now: it may have closed its runtime just now
  if (runtime_state() == RuntimePipe::State::closed) {
    say(why + ": the program's hydro runtime has closed (its training is over): no checkpoint to ask for");
    return;
  }
  if (awaiting_ready_) {
    if (!exit_held_)
      say(why + ": the program's hydro runtime is not up yet; asking it to checkpoint and exit once it is");
    exit_held_ = true;
    return;
  }
  say(why + ": asking the program to checkpoint and exit (" + signal_name(exit_signal_) + "), then requeueing the job");
  send_exit();
}

void Supervisor::send_exit() {
  exit_sent_ = true;
  signal_program(exit_signal_);
}

// A checkpoint-and-exit read the runtime as up just before it closed, and reached the program once
// its handlers were gone: it killed a program whose training was over, in its teardown. What that
// had left to do (a last save, say) is lost, so the job runs again from its newest checkpoint, as
// for a program that checkpointed and asked for it.
void Supervisor::settle_teardown_race() {
  pipe_.read_available();
  if (!exit_sent_ || runtime_state() != RuntimePipe::State::closed || !WIFSIGNALED(status_) ||
      WTERMSIG(status_) != exit_signal_)
    return;
  say("the checkpoint-and-exit reached the program just as its hydro runtime closed, and killed it in its teardown: "
      "counting that as a request to run again, from its newest checkpoint");
  status_ = W_EXITCODE(kExitRequeue, 0);
}

// A launcher inside the program ends with its own status when its workers exit for a requeue
// (torchrun: 1, its ChildFailedError). Once hydro-launch or Slurm asked for the exit, a worker's
// report that it checkpointed to exit decides; so does a checkpoint-and-exit that reached the
// workers just as their runtimes closed (it killed them in their teardown, as
// settle_teardown_race says for a program of its own).
void Supervisor::settle_workers_exit() {
  read_reports();
  const bool ended_well = WIFEXITED(status_) && (WEXITSTATUS(status_) == 0 || WEXITSTATUS(status_) == kExitRequeue);
  if (!(exit_sent_ || terminating_) || ended_well || reports_.up() == 0) return;
  std::string why;
  if (reports_.exiting())
    why = std::to_string(reports_.exiting()) + " of the program's " + std::to_string(reports_.up()) +
          " workers checkpointed to exit for a requeue";
  else if (exit_sent_ && reports_.state() == RuntimePipe::State::closed)
    why = "the checkpoint-and-exit reached the workers just as their hydro runtimes closed";
  else
    return;
  say(why + ": counting the program's end (" +
      (WIFEXITED(status_) ? "status " + std::to_string(WEXITSTATUS(status_)) : signal_name(WTERMSIG(status_))) +
      ") as status " + std::to_string(kExitRequeue));
  status_ = W_EXITCODE(kExitRequeue, 0);
}

}  // namespace hydro::launcher
