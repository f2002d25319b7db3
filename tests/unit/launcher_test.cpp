// hydro-launch as a whole process: resume, signal forwarding and the requeue decision.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "fault_fs.h"
#include "hydro/subprocess.h"
#include "spawn_launcher.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/exit_codes.h"
#include "supervisor.h"

namespace hydro {
namespace {

using launcher::decide_exit;
using test::fake_scontrol;
using test::LaunchResult;
using test::run_launcher;
using test::until_logged;
using test::until_pending;

int exited(int code) { return code << 8; }

TEST(ExitDecision, RequeueOnlyWhenTheProgramAsksAndSlurmIsNotEndingTheJob) {
  auto d = decide_exit(exited(kExitRequeue), /*terminating=*/false, /*in_slurm_job=*/true);
  EXPECT_TRUE(d.requeue);
  EXPECT_EQ(d.exit_code, kExitRequeue);
  d = decide_exit(exited(kExitRequeue), true, true);
  EXPECT_FALSE(d.requeue) << "after SIGTERM Slurm decides: a scancel must not turn into a requeue";
  d = decide_exit(exited(kExitRequeue), false, false);
  EXPECT_FALSE(d.requeue);
  d = decide_exit(exited(0), false, true);
  EXPECT_FALSE(d.requeue);
  EXPECT_EQ(d.exit_code, 0);
  d = decide_exit(SIGKILL, false, true);
  EXPECT_FALSE(d.requeue);
  EXPECT_EQ(d.exit_code, 128 + SIGKILL);
}

TEST(ExitDecision, AWatchdogExpiryRequeuesUpToMaxRestarts) {
  const std::string hang = "pid 12 scope 'step'";
  auto d = launcher::decide_watchdog_exit(hang, false, true, /*restart_count=*/0, /*max_restarts=*/3);
  EXPECT_TRUE(d.requeue);
  EXPECT_EQ(d.exit_code, kExitRequeue);
  EXPECT_EQ(d.why,
            "watchdog expired: pid 12 scope 'step' hung and was killed; requeueing the job (restart 1 of "
            "--max-restarts 3)");
  d = launcher::decide_watchdog_exit(hang, false, true, 2, 3);
  EXPECT_TRUE(d.requeue);
  d = launcher::decide_watchdog_exit(hang, false, true, 3, 3);
  EXPECT_FALSE(d.requeue);
  EXPECT_EQ(d.exit_code, kExitWatchdog);
  EXPECT_EQ(d.why,
            "watchdog expired: pid 12 scope 'step' hung and was killed; not requeueing: the job has been "
            "restarted 3 times (SLURM_RESTART_COUNT) and --max-restarts is 3");
  d = launcher::decide_watchdog_exit(hang, false, true, 0, 0);
  EXPECT_FALSE(d.requeue) << "--max-restarts 0 never requeues";
  d = launcher::decide_watchdog_exit(hang, /*terminating=*/true, true, 0, 3);
  EXPECT_FALSE(d.requeue) << "after SIGTERM Slurm decides";
  EXPECT_EQ(d.exit_code, kExitWatchdog);
  d = launcher::decide_watchdog_exit(hang, false, /*in_slurm_job=*/false, 0, 3);
  EXPECT_FALSE(d.requeue);
  EXPECT_EQ(d.exit_code, kExitRequeue);
  EXPECT_EQ(d.why,
            "watchdog expired: pid 12 scope 'step' hung and was killed; not in a Slurm job, so nothing to "
            "requeue (exit status 75 asks to be run again)");
}

TEST(ExitDecision, SlurmRestartCount) {
  EXPECT_EQ(launcher::parse_restart_count(nullptr), 0);
  EXPECT_EQ(launcher::parse_restart_count(""), 0);
  EXPECT_EQ(launcher::parse_restart_count("4"), 4);
  EXPECT_EQ(launcher::parse_restart_count("-1"), -1);
  EXPECT_EQ(launcher::parse_restart_count("x"), -1);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Launcher, StartsFreshThenResumesFromTheNewestValidCheckpoint) {
  test::TempDir t;
  const std::string ck = t.path + "/ck";
  const std::string script = "echo \"$HYDRO_CKPT_DIR|${HYDRO_RESUME_FROM:-none}\" > " + t.path + "/seen";
  LaunchResult r = run_launcher({"--checkpoint-dir", ck, "--", "/bin/sh", "-c", script}, {"SLURM_JOB_ID="}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_EQ(slurp(t.path + "/seen"), ck + "|none\n");
  EXPECT_NE(r.err.find("no valid checkpoint in " + ck + ": the program starts fresh"), std::string::npos) << r.err;

  CheckpointDir dir(ck);
  for (int step : {4, 8}) {
    std::unique_ptr<CheckpointWriter> w;
    ASSERT_TRUE(dir.begin(step, &w).ok());
    ASSERT_TRUE(w->write_file("model.pt", "m").ok());
    ASSERT_TRUE(w->commit().ok());
  }
  ASSERT_EQ(::truncate((ck + "/step-000000000008/model.pt").c_str(), 0), 0);
  r = run_launcher({"--checkpoint-dir", ck, "--", "/bin/sh", "-c", script}, {"SLURM_JOB_ID="}, t.path);
  EXPECT_EQ(slurp(t.path + "/seen"), ck + "|" + ck + "/step-000000000004\n");
  EXPECT_NE(r.err.find("warning: checkpoint file " + ck + "/step-000000000008/model.pt: size 0, manifest says 1"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("resuming from step 4 (" + ck + "/step-000000000004)"), std::string::npos) << r.err;
}

// A program that uses the map's signals itself (here SIGUSR2) runs with HYDRO_PAUSE=off: with
// pausing on (HYDRO_PAUSE unset included), they are hydro's and start blocked.
TEST(Launcher, ForwardsSignalsToTheProgram) {
  test::TempDir t;
  const std::string script = "trap 'echo got-usr2 > " + t.path + "/got; exit 0' USR2; touch " + t.path +
                             "/ready; while :; do sleep 0.01; done";
  LaunchResult r = run_launcher({"--", "/bin/sh", "-c", script}, {"SLURM_JOB_ID=", "HYDRO_PAUSE=off"}, t.path, SIGUSR2);
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_EQ(slurp(t.path + "/got"), "got-usr2\n");
  EXPECT_NE(r.err.find("forwarding SIGUSR2 to pid"), std::string::npos) << r.err;
}

// With HYDRO_PAUSE=on, an early pause (`hydroctl pause` in a job's first second, or one queued
// while hydro-launch looked for a checkpoint) reaches a program whose runtime is not up yet: it
// waits there, blocked and pending, for the runtime to take it (PauseGateTest.
// APauseThatCameBeforeTheHandlersIsTakenWhenTheyStart), and never ends the program.
TEST(Launcher, AnEarlyPauseWaitsBlockedInTheProgramInsteadOfKillingIt) {
  test::TempDir t;
  // bash keeps the mask it starts with: the pause stays pending there.
  const std::string script = "touch " + t.path + "/ready; " + until_pending(SIGUSR1) +
                             "grep -E '^(ShdPnd|SigBlk|SigIgn)' /proc/$$/status > " + t.path + "/status";
  LaunchResult r =
      run_launcher({"--", "/bin/bash", "-c", script}, {"SLURM_JOB_ID=", "HYDRO_PAUSE=on"}, t.path, SIGUSR1);
  ASSERT_TRUE(WIFEXITED(r.status)) << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_NE(r.err.find("forwarding SIGUSR1 to pid"), std::string::npos) << r.err;
  const std::string st = slurp(t.path + "/status");
  unsigned long long blocked = 0, pending = 0, ignored = 0;
  ASSERT_EQ(std::sscanf(st.c_str(), "ShdPnd: %llx SigBlk: %llx SigIgn: %llx", &pending, &blocked, &ignored), 3) << st;
  const unsigned long long usr1 = 1ull << (SIGUSR1 - 1), usr2 = 1ull << (SIGUSR2 - 1);
  EXPECT_EQ(blocked & (usr1 | usr2), usr1 | usr2) << st;
  EXPECT_EQ(ignored & (usr1 | usr2), usr1 | usr2) << st;
  EXPECT_EQ(pending & usr1, usr1) << st;
  // dash (/bin/sh, as `sbatch --wrap` runs) clears its mask at start: there it is ignored.
  ::unlink((t.path + "/ready").c_str());
  r = run_launcher({"--", "/bin/sh", "-c", "touch " + t.path + "/ready; sleep 0.3"},
                   {"SLURM_JOB_ID=", "HYDRO_PAUSE=on"}, t.path, SIGUSR1);
  ASSERT_TRUE(WIFEXITED(r.status)) << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
}

// HYDRO_PAUSE unset is on, for hydro-launch as for the runtime (Settings::from_env): a pause that
// reaches hydro-launch in the program's first moments waits in it, pending, and does not end it
// (it did, with exit 138, when only HYDRO_PAUSE=on held it).
TEST(Launcher, AnEarlyPauseWithHydroPauseUnsetWaitsToo) {
  test::TempDir t;
  const std::string script = "touch " + t.path + "/ready; " + until_pending(SIGUSR1) +
                             "grep -E '^(ShdPnd|SigBlk)' /proc/$$/status > " + t.path + "/status";
  LaunchResult r = run_launcher({"--", "/bin/bash", "-c", script}, {"SLURM_JOB_ID=", "HYDRO_PAUSE="}, t.path, SIGUSR1);
  ASSERT_TRUE(WIFEXITED(r.status)) << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  const std::string st = slurp(t.path + "/status");
  unsigned long long blocked = 0, pending = 0;
  ASSERT_EQ(std::sscanf(st.c_str(), "ShdPnd: %llx SigBlk: %llx", &pending, &blocked), 2) << st;
  EXPECT_EQ(pending & (1ull << (SIGUSR1 - 1)), 1ull << (SIGUSR1 - 1)) << st;
}

// Helpers (scontrol show job, scontrol requeue) start with no signal blocked: hydro-launch blocks
// SIGTERM for its signalfd, and `timeout 10 scontrol` must still be able to end a hung one.
TEST(Subprocess, AHelperStartsWithNoSignalBlocked) {
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &term, &old), 0);
  std::string out;
  int rc = run_capture({"grep", "^SigBlk", "/proc/self/status"}, &out);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "SigBlk:\t0000000000000000\n");
}

// A stand-in scontrol that records its arguments in DIR/scontrol.args: the real one is exercised
// by the Slurm integration tests (tests/integration/suspend_requeue.sh).
// A program that says it is ready (to hydro-launch as hydro's Runtime does, and to the test),
// then checkpoints-and-exits (status 75) on SIGTERM.
std::string exits_75_on_term(const std::string& dir) {
  return "trap 'exit " + std::to_string(kExitRequeue) + "' TERM; echo r >&$HYDRO_LAUNCH_READY_FD; touch " + dir +
         "/ready; while :; do sleep 0.01; done";
}

TEST(Launcher, RequeueSignalAsksForACheckpointThenRequeuesTheJob) {
  test::TempDir t;
  const std::string fake = fake_scontrol(t.path);
  const std::string script = exits_75_on_term(t.path);
  LaunchResult r = run_launcher({"--requeue-signal", "USR1", "--scontrol", fake, "--", "/bin/sh", "-c", script},
                                {"SLURM_JOB_ID=4242"}, t.path, SIGUSR1);
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  EXPECT_EQ(slurp(t.path + "/scontrol.args"), "requeue 4242\n");
  EXPECT_NE(r.err.find("job 4242 requeued"), std::string::npos) << r.err;
}

TEST(Launcher, ARequeueSignalBeforeTheRuntimeIsUpIsHeldUntilItIs) {
  test::TempDir t;
  const std::string fake = fake_scontrol(t.path);
  // Ready for the test at once, for hydro-launch only once it has held the signal: as a Runtime
  // still starting.
  const std::string script = "trap 'exit " + std::to_string(kExitRequeue) + "' TERM; touch " + t.path + "/ready; " +
                             until_logged(t.path, "runtime is not up yet") +
                             "echo r >&$HYDRO_LAUNCH_READY_FD; while :; do sleep 0.01; done";
  LaunchResult r = run_launcher({"--requeue-signal", "USR1", "--scontrol", fake, "--", "/bin/sh", "-c", script},
                                {"SLURM_JOB_ID=4242"}, t.path, SIGUSR1);
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  EXPECT_NE(
      r.err.find("SIGUSR1: the program's hydro runtime is not up yet; asking it to checkpoint and exit once it is"),
      std::string::npos)
      << r.err;
  EXPECT_NE(
      r.err.find(
          "the program's hydro runtime is up: asking it to checkpoint and exit (SIGTERM), then requeueing the job"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(t.path + "/scontrol.args"), "requeue 4242\n");
}

// A checkpoint-and-exit asked after the program's runtime closed (its training over, its teardown
// under way) is not sent: the program ends on its own, and the finished job is no failed one.
TEST(Launcher, NoCheckpointAndExitIsAskedOfARuntimeThatHasClosed) {
  test::TempDir t;
  const std::string fake = fake_scontrol(t.path);
  const std::string script = "echo r >&$HYDRO_LAUNCH_READY_FD; echo c >&$HYDRO_LAUNCH_READY_FD; touch " + t.path +
                             "/ready; " + until_logged(t.path, "runtime has closed") + "echo teardown done >&2";
  LaunchResult r = run_launcher({"--requeue-signal", "USR1", "--scontrol", fake, "--", "/bin/sh", "-c", script},
                                {"SLURM_JOB_ID=4242"}, t.path, SIGUSR1);
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.err;
  EXPECT_NE(r.err.find("SIGUSR1: the program's hydro runtime has closed (its training is over): no checkpoint to ask "
                       "for"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("teardown done"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(t.path + "/scontrol.args"), "");
}

// The race, made certain: the runtime is up when hydro-launch sends the checkpoint-and-exit, and
// closes (its handlers gone) before the signal is taken, which kills the program in its teardown.
// What the teardown had left to do is lost, so the job is requeued, to run again from its newest
// checkpoint, never ended as a failure.
TEST(Launcher, ACheckpointAndExitThatKillsTheProgramInItsTeardownRequeuesTheJob) {
  test::TempDir t;
  const std::string fake = fake_scontrol(t.path);
  const std::string script =
      "trap 'trap - TERM; echo c >&$HYDRO_LAUNCH_READY_FD; kill -TERM $$' TERM; "
      "echo r >&$HYDRO_LAUNCH_READY_FD; touch " +
      t.path + "/ready; while :; do sleep 0.01; done";
  LaunchResult r = run_launcher({"--requeue-signal", "USR1", "--scontrol", fake, "--", "/bin/sh", "-c", script},
                                {"SLURM_JOB_ID=4242"}, t.path, SIGUSR1);
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  EXPECT_NE(r.err.find("killed it in its teardown: counting that as a request to run again"), std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(t.path + "/scontrol.args"), "requeue 4242\n");
}

// The job's signal map (HYDRO_SIGNALS, from --hydro-signals or the admin's signals:) is what
// hydro-launch forwards, and its checkpoint_exit is what it asks a checkpoint-and-exit with. (The
// program traps the pause signal itself: HYDRO_PAUSE=off, else it starts with it held.)
TEST(Launcher, FollowsTheJobsSignalMap) {
  test::TempDir t;
  std::string script =
      "trap 'echo got-pwr > " + t.path + "/got; exit 0' PWR; touch " + t.path + "/ready; while :; do sleep 0.01; done";
  LaunchResult r = run_launcher({"--", "/bin/bash", "-c", script},
                                {"SLURM_JOB_ID=", "HYDRO_SIGNALS=pause=PWR", "HYDRO_PAUSE=off"}, t.path, SIGPWR);
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_EQ(slurp(t.path + "/got"), "got-pwr\n");
  EXPECT_NE(r.err.find("forwarding SIGPWR to pid"), std::string::npos) << r.err;

  ::unlink((t.path + "/ready").c_str());
  const std::string fake = fake_scontrol(t.path);
  script = "trap 'exit " + std::to_string(kExitRequeue) + "' URG; echo r >&$HYDRO_LAUNCH_READY_FD; touch " + t.path +
           "/ready; while :; do sleep 0.01; done";
  r = run_launcher({"--requeue-signal", "USR1", "--scontrol", fake, "--", "/bin/bash", "-c", script},
                   {"SLURM_JOB_ID=4242", "HYDRO_SIGNALS=checkpoint_exit=URG"}, t.path, SIGUSR1);
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  EXPECT_NE(r.err.find("asking the program to checkpoint and exit (SIGURG)"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(t.path + "/scontrol.args"), "requeue 4242\n");

  r = run_launcher({"--", "true"}, {"HYDRO_SIGNALS=pause=11"}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_NE(r.err.find("hydro-launch: HYDRO_SIGNALS: signal 11 reports a fault"), std::string::npos) << r.err;
}

TEST(Launcher, TermFromSlurmIsForwardedAndNeverTurnedIntoARequeue) {
  test::TempDir t;
  const std::string fake = fake_scontrol(t.path);
  LaunchResult r = run_launcher({"--scontrol", fake, "--", "/bin/sh", "-c", exits_75_on_term(t.path)},
                                {"SLURM_JOB_ID=4242"}, t.path, SIGTERM);
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  EXPECT_FALSE(posix_fs().exists(t.path + "/scontrol.args")) << "a SIGTERM must not become a requeue";
}

TEST(Launcher, TermOfAPreemptionIsTurnedIntoARequeueOnceTheProgramHasCheckpointed) {
  test::TempDir t;
  const std::string fake = fake_scontrol(t.path, "2026-11-23T05:47:04");
  LaunchResult r = run_launcher({"--scontrol", fake, "--", "/bin/sh", "-c", exits_75_on_term(t.path)},
                                {"SLURM_JOB_ID=4242"}, t.path, SIGTERM);
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  EXPECT_EQ(slurp(t.path + "/scontrol.args"), "requeue 4242\n");
  EXPECT_NE(r.err.find("the job is being preempted (PreemptTime=2026-11-23T05:47:04): requeueing it now"),
            std::string::npos)
      << r.err;
}

TEST(Launcher, ItsOwnRequeuesStopAtMaxRestarts) {
  test::TempDir t;
  const std::string fake = fake_scontrol(t.path);
  LaunchResult r =
      run_launcher({"--requeue-signal", "USR1", "--scontrol", fake, "--", "/bin/sh", "-c", exits_75_on_term(t.path)},
                   {"SLURM_JOB_ID=4242", "SLURM_RESTART_COUNT=2", "HYDRO_MAX_RESTARTS=2"}, t.path, SIGUSR1);
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  EXPECT_FALSE(posix_fs().exists(t.path + "/scontrol.args")) << "requeued past --max-restarts";
  EXPECT_NE(
      r.err.find("not requeueing: the job has been restarted 2 times (SLURM_RESTART_COUNT) and --max-restarts is 2"),
      std::string::npos)
      << r.err;
}

TEST(Launcher, TimeLimitMarginAsksForACheckpointThenRequeuesTheJob) {
  test::TempDir t;
  // The job ends 5 s after hydro-launch first asks; 2 s before that it acts, with no signal from
  // anyone.
  const std::string fake = fake_scontrol(t.path, "None", "+5");
  LaunchResult r =
      run_launcher({"--time-limit-margin", "2", "--scontrol", fake, "--", "/bin/sh", "-c", exits_75_on_term(t.path)},
                   {"SLURM_JOB_ID=4242"}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  EXPECT_EQ(slurp(t.path + "/scontrol.args"), "requeue 4242\n");
  EXPECT_NE(r.err.find("time limit: --time-limit-margin 2 s before the job's end: asking the program to checkpoint "
                       "and exit (SIGTERM), then requeueing the job"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("job 4242 requeued"), std::string::npos) << r.err;
}

TEST(Launcher, TimeLimitMarginFromTheEnvironmentAndItsErrors) {
  test::TempDir t;
  LaunchResult r = run_launcher({"--", "true"}, {"HYDRO_TIME_LIMIT_MARGIN=soon"}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_EQ(r.err, "hydro-launch: HYDRO_TIME_LIMIT_MARGIN='soon' is not a whole number\n");
  r = run_launcher({"--time-limit-margin", "-5", "--", "true"}, {}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_EQ(r.err, "hydro-launch: --time-limit-margin=-5 is out of range [0, 31536000]\n");
  // The plugin's range, from the one settings schema.
  r = run_launcher({"--", "true"}, {"HYDRO_MAX_RESTARTS=2000000"}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_EQ(r.err, "hydro-launch: HYDRO_MAX_RESTARTS=2000000 is out of range [0, 1000000]\n");
  // Outside a Slurm job there is nothing to watch: the program just runs.
  r = run_launcher({"--", "true"}, {"HYDRO_TIME_LIMIT_MARGIN=60", "SLURM_JOB_ID="}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_NE(r.err.find("--time-limit-margin: not in a Slurm job (no SLURM_JOB_ID); no time limit to watch"),
            std::string::npos)
      << r.err;
}

TEST(Launcher, BadArgumentsAreClearErrors) {
  test::TempDir t;
  LaunchResult r = run_launcher({"--requeue-signal", "BANANA", "--", "true"}, {}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_EQ(r.err, "hydro-launch: --requeue-signal: 'BANANA' is not a signal that can be caught\n");
  r = run_launcher({"--checkpoint-dir", "rel/dir", "--", "true"}, {}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_EQ(r.err, "hydro-launch: --checkpoint-dir: 'rel/dir' must be an absolute path\n");
  r = run_launcher({}, {}, t.path);
  EXPECT_NE(WEXITSTATUS(r.status), 0);
  EXPECT_NE(r.err.find("command is required"), std::string::npos) << r.err;
  r = run_launcher({"--", "/nonexistent/program"}, {"SLURM_JOB_ID="}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 127);
  EXPECT_NE(r.err.find("cannot run /nonexistent/program: No such file or directory"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hydro
