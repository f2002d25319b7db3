// hydro-launch's requeue when another task (or Slurm) requeued the job first: several tasks see
// one hang at once, and only the first `scontrol requeue` succeeds; and when it cannot requeue.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>

#include "fault_fs.h"
#include "hydro/exit_codes.h"
#include "requeue.h"
#include "spawn_launcher.h"

namespace hydro {
namespace {

using launcher::requeued_since;

TEST(Requeue, AJobRequeuedSinceThisRunStartedIsSeenInScontrolsOutput) {
  EXPECT_TRUE(requeued_since("   JobState=PENDING Reason=BeginTime Dependency=(null)\n   Restarts=1 BatchFlag=1", 0));
  EXPECT_TRUE(requeued_since("   JobState=RUNNING Reason=None\n   Requeue=1 Restarts=3 BatchFlag=1", 2));
  EXPECT_TRUE(requeued_since("   JobState=REQUEUE_HOLD Reason=JobHeldUser\n   Restarts=0", 0));
  EXPECT_FALSE(requeued_since("   JobState=RUNNING Reason=None\n   Requeue=1 Restarts=2 BatchFlag=1", 2));
  EXPECT_FALSE(requeued_since("   JobState=COMPLETING Reason=None\n   Restarts=0", 0));
  EXPECT_FALSE(requeued_since("", 0));
}

// A scontrol whose `requeue` fails as Slurm's does for a job already pending, and whose
// `show job` prints STATE and RESTARTS.
std::string scontrol_requeued_by_a_peer(const std::string& dir, const std::string& state, int restarts) {
  const std::string path = dir + "/scontrol";
  std::ofstream(path) << "#!/bin/sh\nif [ \"$1\" = show ]; then echo '   JobState=" << state
                      << " Reason=None'; echo '   Requeue=1 Restarts=" << restarts
                      << " BatchFlag=1'; exit 0; fi\necho 'Job is pending execution for job 4242' >&2; exit 1\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

test::LaunchResult run_asking_to_be_requeued(const std::string& dir, const std::string& scontrol) {
  return test::run_launcher({"--scontrol", scontrol, "--", "/bin/sh", "-c", "exit 75"},
                            {"SLURM_JOB_ID=4242", "SLURM_PROCID=0", "SLURM_RESTART_COUNT=0"}, dir);
}

TEST(Requeue, AJobAnotherTaskRequeuedFirstIsNoError) {
  test::TempDir t;
  test::LaunchResult r = run_asking_to_be_requeued(t.path, scontrol_requeued_by_a_peer(t.path, "PENDING", 1));
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  EXPECT_NE(r.err.find("job 4242 requeued already (by another task's hydro-launch, or by Slurm)"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("error:"), std::string::npos) << r.err;
}

// A requeue that failed while the job runs on (scontrol cannot reach slurmctld, the job is not
// requeueable) is left to the host: hydro-launch exits kExitRequeueJob, which hydro's plugin or
// slurm.conf's RequeueExit turns into the requeue.
TEST(Requeue, ARequeueThatFailedWhileTheJobRunsOnIsLeftToTheHost) {
  test::TempDir t;
  test::LaunchResult r = run_asking_to_be_requeued(t.path, scontrol_requeued_by_a_peer(t.path, "RUNNING", 0));
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeueJob) << r.err;
  EXPECT_NE(r.err.find("`" + t.path +
                       "/scontrol requeue 4242` failed with status 1; exiting 85 for the host to "
                       "requeue the job: hydro's SPANK plugin does, or slurm.conf's RequeueExit=85"),
            std::string::npos)
      << r.err;
}

// In a container there is no scontrol at all: the same, and the message says so.
TEST(Requeue, NoScontrolWhereTheTaskRunsLeavesTheRequeueToTheHost) {
  test::TempDir t;
  test::LaunchResult r = run_asking_to_be_requeued(t.path, t.path + "/no-such-scontrol");
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeueJob) << r.err;
  EXPECT_NE(r.err.find("failed with status 127 (no scontrol here: in a container?); exiting 85"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace hydro
