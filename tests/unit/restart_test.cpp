// hydro-launch --restarts: a crashed or hung program started again inside the job's allocation,
// from its newest checkpoint, and the requeue once restarting cannot help.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <functional>
#include <iterator>

#include "fault_fs.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/exit_codes.h"
#include "spawn_launcher.h"
#include "supervisor.h"

namespace hydro {
namespace {

using launcher::decide_restart;

int exited(int code) { return code << 8; }

// The newest checkpoint's step, as hydro-launch would find it.
std::function<int64_t()> newest(int64_t step) {
  return [step] { return step; };
}

launcher::Options with_restarts(int n) {
  launcher::Options o;
  o.restarts = n;
  return o;
}

TEST(RestartDecision, ACrashIsStartedAgainUntilTheRestartsAreUsedUp) {
  auto d = decide_restart(with_restarts(2), SIGKILL, false, "", /*done=*/0, /*resumed=*/-1, /*newest=*/newest(-1), 1);
  EXPECT_TRUE(d.restart);
  EXPECT_EQ(d.why,
            "the program was killed by SIGKILL; restart 1 of --restarts 2 (generation 1): starting it again in this "
            "allocation from its newest checkpoint");
  d = decide_restart(with_restarts(2), exited(1), false, "", 1, 100, newest(200), 1);
  EXPECT_TRUE(d.restart) << d.why;
  d = decide_restart(with_restarts(2), exited(1), false, "", 2, 200, newest(300), 1);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.why, "the program exited with status 1; not restarting it again: --restarts 2 used up");
}

TEST(RestartDecision, ARestartThatFailsBeforeANewerCheckpointIsNotTriedAgain) {
  auto d = decide_restart(with_restarts(5), SIGKILL, false, "", 1, 100, newest(100), 1);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.why,
            "the program was killed by SIGKILL; not restarting it again: it failed again before any checkpoint past "
            "step 100, so a restart here would redo the same steps");
  d = decide_restart(with_restarts(5), SIGKILL, false, "pid 7 scope 'step'", 0, -1, newest(-1), 1);
  EXPECT_TRUE(d.restart);
  EXPECT_EQ(d.why.rfind("the watchdog killed it (pid 7 scope 'step' hung); restart 1 of --restarts 5", 0), 0u) << d.why;
}

TEST(RestartDecision, NothingIsRestartedThatEndedWellOrThatSlurmEndsOrWithSeveralTasks) {
  for (int status : {exited(0), exited(kExitRequeue)}) {
    auto d = decide_restart(with_restarts(3), status, false, "", 0, -1, newest(-1), 1);
    EXPECT_FALSE(d.restart);
    EXPECT_EQ(d.why, "");
  }
  EXPECT_FALSE(decide_restart(with_restarts(3), SIGKILL, /*terminating=*/true, "", 0, -1, newest(-1), 1).restart);
  EXPECT_FALSE(decide_restart(with_restarts(0), SIGKILL, false, "", 0, -1, newest(-1), 1).restart);
  auto d = decide_restart(with_restarts(3), SIGKILL, false, "", 0, -1, newest(-1), /*world_size=*/4);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.why,
            "the program was killed by SIGKILL; not restarting it in this allocation: the step's 4 tasks have no "
            "restart group to restart together (see the warning at hydro-launch's start)");
  d = decide_restart(with_restarts(3), SIGKILL, false, "", 0, -1, newest(-1), /*world_size=*/4, /*together=*/true);
  EXPECT_TRUE(d.restart) << d.why;
}

// Found by the soak test: the time limit's margin asked for the checkpoint and exit while the disk
// was full, the program failed (status 1), and a restart in place trained on until Slurm's time
// limit ended the job (TIMEOUT, never requeued). Once hydro-launch has asked for the exit, a failure
// is requeued from the newest checkpoint.
TEST(RestartDecision, AFailureAfterHydroLaunchAskedForTheExitIsRequeuedNotRestartedInPlace) {
  for (int status : {exited(1), SIGKILL}) {
    auto d = decide_restart(with_restarts(3), status, false, "", 0, -1, newest(-1), 1, false, /*exit_asked=*/true);
    EXPECT_FALSE(d.restart);
    EXPECT_NE(d.why.find("not restarting it in this allocation: hydro-launch had asked it to checkpoint and exit"),
              std::string::npos)
        << d.why;
  }
}

// With several tasks, a checkpoint-and-exit is every task's and task 0 requeues once; a hang (or,
// with --restarts, a failure) is seen by one task alone, whichever it is, and that task requeues.
TEST(RestartDecision, TheTaskThatSawAHangOrAFailureRequeuesNotOnlyTaskZero) {
  ::setenv("SLURM_JOB_ID", "4242", 1);
  ::setenv("SLURM_PROCID", "3", 1);
  ::setenv("SLURM_RESTART_COUNT", "0", 1);
  launcher::Options o = with_restarts(1);
  auto d = launcher::decide_after_run(o, SIGKILL, false, "pid 9 scope 'step'");
  EXPECT_TRUE(d.requeue) << d.why;
  d = launcher::decide_after_run(o, exited(1), false, "");
  EXPECT_TRUE(d.requeue) << d.why;
  d = launcher::decide_after_run(o, exited(kExitRequeue), false, "");
  EXPECT_FALSE(d.requeue);
  EXPECT_EQ(d.why,
            "the program checkpointed and asks to be run again: requeueing the job (hydro-launch of task 0 "
            "runs the requeue)");
  for (const char* v : {"SLURM_JOB_ID", "SLURM_PROCID", "SLURM_RESTART_COUNT"}) ::unsetenv(v);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void commit_step(const std::string& root, int64_t step) {
  CheckpointDir dir(root);
  ASSERT_TRUE(dir.open().ok());
  std::unique_ptr<CheckpointWriter> w;
  ASSERT_TRUE(dir.begin(step, &w).ok());
  ASSERT_TRUE(w->write_file("model.pt", "m").ok());
  ASSERT_TRUE(w->commit().ok());
}

// The program records each start (generation and resume), killed by SIGKILL in its first run; the
// second one commits nothing newer and ends cleanly.
TEST(Restart, ACrashedProgramStartsAgainInPlaceFromTheNewestCheckpoint) {
  test::TempDir t;
  const std::string ck = t.path + "/ck";
  commit_step(ck, 4);
  const std::string script = "echo \"${HYDRO_RESTART_GENERATION:-0} ${HYDRO_RESUME_FROM##*/}\" >> " + t.path +
                             "/starts; [ -n \"$HYDRO_RESTART_GENERATION\" ] || kill -KILL $$";
  test::LaunchResult r = test::run_launcher({"--restarts", "2", "--checkpoint-dir", ck, "--", "/bin/sh", "-c", script},
                                            {"SLURM_JOB_ID="}, t.path);
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.err;
  EXPECT_EQ(slurp(t.path + "/starts"), "0 step-000000000004\n1 step-000000000004\n");
  EXPECT_NE(r.err.find("the program was killed by SIGKILL; restart 1 of --restarts 2 (generation 1)"),
            std::string::npos)
      << r.err;
}

// Always killed, never a newer checkpoint: one restart, then the job is requeued (--max-restarts).
TEST(Restart, WhenRestartingCannotHelpTheJobIsRequeued) {
  test::TempDir t;
  const std::string ck = t.path + "/ck";
  commit_step(ck, 4);
  const std::string fake = test::fake_scontrol(t.path);
  test::LaunchResult r =
      test::run_launcher({"--restarts", "3", "--scontrol", fake, "--checkpoint-dir", ck, "--", "/bin/sh", "-c",
                          "echo started >> " + t.path + "/starts; kill -KILL $$"},
                         {"SLURM_JOB_ID=4242", "SLURM_RESTART_COUNT=0", "HYDRO_MAX_RESTARTS=3"}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  EXPECT_EQ(slurp(t.path + "/starts"), "started\nstarted\n");
  EXPECT_NE(r.err.find("not restarting it again: it failed again before any checkpoint past step 4"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the program was killed by SIGKILL; requeueing the job (restart 1 of --max-restarts 3)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(t.path + "/scontrol.args"), "requeue 4242\n");
}

TEST(Restart, BadCountsAreClearErrors) {
  test::TempDir t;
  test::LaunchResult r = test::run_launcher({"--restarts", "5000", "--", "true"}, {}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_EQ(r.err, "hydro-launch: --restarts=5000 is out of range [0, 1000]\n");
  r = test::run_launcher({"--", "true"}, {"HYDRO_RESTARTS=many"}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_EQ(r.err, "hydro-launch: HYDRO_RESTARTS='many' is not a whole number\n");
}

}  // namespace
}  // namespace hydro
