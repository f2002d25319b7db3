// The suspend checkpoint (HYDRO_SUSPEND_CHECKPOINT): SIGTSTP with a checkpoint that fits before
// SIGSTOP ends the step, commits, then pauses; with it off, SIGTSTP pauses at an operator.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <optional>
#include <thread>

#include "fault_fs.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/pause_gate.h"
#include "hydro/runtime.h"
#include "runtime_fixture.h"

namespace hydro {
namespace {

using test::eventually;
using test::make_model;
using test::RuntimeTest;
using test::train_step;

}  // namespace
}  // namespace hydro

namespace hydro {
namespace {

// HYDRO_SUSPEND_CHECKPOINT=auto: a small state saves well within the suspend grace time before
// SIGSTOP, so SIGTSTP lets the step end, commits a checkpoint of that step, then pauses; SIGCONT
// resumes. With off, SIGTSTP pauses at the next operator and writes nothing. The grace is 30 s
// here, not Slurm's default 2 s: only a stall of the machine of over 20 s could turn the
// checkpoint off (a grace that is too short: tests/integration/suspend_grace.sh).
void suspend_run(bool suspend_checkpoint, bool* checkpointed, bool* op_armed) {
  test::TempDir t{test::TempDir::InMemory{}};  // the save is timed against the grace: no disk's fsync
  auto model = make_model();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  Settings s;
  s.checkpoint_dir = t.path;
  s.keep_last = 0;
  s.suspend_checkpoint = suspend_checkpoint;
  s.suspend_grace_s = 30;
  Runtime rt(s);
  rt.track("model", *model);
  rt.track("optimizer", opt);
  train_step(model, opt);
  rt.step_end(1);
  rt.save(1);  // the first checkpoint measures how long one takes
  std::atomic<bool> stop{false};
  std::atomic<long> last{1};
  std::thread trainer([&] {
    for (long step = 2; !stop; ++step) {
      train_step(model, opt);
      rt.step_end(step);
      last = step;
    }
  });
  ASSERT_TRUE(eventually([&] { return last > 5; }));
  ::kill(::getpid(), SIGTSTP);
  ASSERT_TRUE(eventually([] { return PauseGate::instance().threads_waiting() == 1; }));
  // Off: the watcher arms the operator callback, which may come a moment after the trainer has
  // already paused at its step end (on a busy machine). Auto: nothing arms it.
  *op_armed = suspend_checkpoint ? operator_pause_armed() : eventually([] { return operator_pause_armed(); });
  const long held = last;
  CheckpointDir dir(t.path);
  std::optional<CheckpointInfo> latest;
  std::vector<std::string> warnings;
  ASSERT_TRUE(dir.latest_valid(&latest, &warnings).ok());
  *checkpointed = latest && latest->step > 1;
  if (*checkpointed) EXPECT_EQ(latest->step, held + 1) << "the checkpoint is of the step that ended at the pause";
  ::kill(::getpid(), SIGCONT);
  ASSERT_TRUE(eventually([&] { return last > held + 1; }));
  stop = true;
  trainer.join();
}

TEST_F(RuntimeTest, SuspendCommitsACheckpointFirstWhenItFitsInTheGraceTime) {
  bool checkpointed = false, op_armed = true;
  suspend_run(true, &checkpointed, &op_armed);
  EXPECT_TRUE(checkpointed);
  EXPECT_FALSE(op_armed) << "the step was let end, not paused at an operator";
}

TEST_F(RuntimeTest, SuspendCheckpointOffPausesAtAnOperatorAndWritesNothing) {
  bool checkpointed = true, op_armed = false;
  suspend_run(false, &checkpointed, &op_armed);
  EXPECT_FALSE(checkpointed);
  EXPECT_TRUE(op_armed);
}

}  // namespace
}  // namespace hydro
