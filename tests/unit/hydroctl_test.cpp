// hydroctl as a whole process: status tables, and pause/resume of a process for its owner only.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "fault_fs.h"
#include "hydro/checkpoint_dir.h"
#include "job_lookup.h"
#include "status_table.h"

namespace hydro {
namespace {

struct Output {
  int code;
  std::string text;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

Output run(const std::string& cmd) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string text;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

TEST(HydroctlStatus, ListsVerifiedCorruptAndLatest) {
  test::TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  for (int step : {10, 20}) {
    std::unique_ptr<CheckpointWriter> w;
    ASSERT_TRUE(dir.begin(step, &w).ok());
    ASSERT_TRUE(w->write_file("model.pt", std::string(100, 'm')).ok());
    ASSERT_TRUE(w->commit().ok());
  }
  ASSERT_EQ(::truncate((t.path + "/step-000000000010/model.pt").c_str(), 3), 0);
  bool ok = false;
  std::string table = ctl::status_table(t.path, &ok);
  ASSERT_TRUE(ok);
  std::istringstream lines(table);
  std::string header, first, why, second;
  std::getline(lines, header);
  std::getline(lines, first);
  std::getline(lines, why);
  std::getline(lines, second);
  EXPECT_EQ(header.substr(0, 4), "STEP");
  EXPECT_EQ(first.substr(0, 2), "10");
  EXPECT_NE(first.find("CORRUPT"), std::string::npos) << table;
  EXPECT_EQ(why,
            "    checkpoint file " + t.path + "/step-000000000010/model.pt: size 3, manifest says 100 (truncated?)");
  EXPECT_EQ(second.substr(0, 2), "20");
  EXPECT_NE(second.find("verified <- latest"), std::string::npos) << table;
}

TEST(HydroctlStatus, MissingDirectoryIsAnError) {
  bool ok = true;
  std::string table = ctl::status_table("/nonexistent/hydro", &ok);
  EXPECT_FALSE(ok);
  EXPECT_EQ(table, "hydroctl: open directory /nonexistent/hydro: No such file or directory\n");
}

TEST(Hydroctl, PausesAndResumesItsOwnProcess) {
  test::TempDir t;
  pid_t child = ::fork();
  if (child == 0) {
    ::execl("/bin/sh", "sh", "-c",
            ("trap 'echo paused >> " + t.path + "/log' USR1; trap 'echo resumed >> " + t.path +
             "/log; exit 0' USR2; touch " + t.path + "/ready; while :; do sleep 0.01; done")
                .c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_TRUE(test::eventually([&] { return posix_fs().exists(t.path + "/ready"); }));
  Output o = run(std::string(HYDROCTL_BIN) + " pause --pid " + std::to_string(child));
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_EQ(o.text, "hydroctl: sent SIGUSR1 to process " + std::to_string(child) + " (pause)\n");
  ASSERT_TRUE(test::eventually([&] { return posix_fs().exists(t.path + "/log"); }));
  o = run(std::string(HYDROCTL_BIN) + " resume --pid " + std::to_string(child));
  EXPECT_EQ(o.code, 0) << o.text;
  int status = 0;
  ::waitpid(child, &status, 0);
  std::ifstream log(t.path + "/log");
  std::stringstream s;
  s << log.rdbuf();
  EXPECT_EQ(s.str(), "paused\nresumed\n");
}

// A second Unix user (Debian's `nobody`) may not pause root's process. Needs root, as CI has.
TEST(Hydroctl, AnotherUsersProcessIsRefused) {
  ASSERT_EQ(::getuid(), 0u) << "this test runs hydroctl as the user nobody, which needs root";
  // A copy nobody can reach, wherever the build tree is.
  test::TempDir t;
  ASSERT_EQ(::chmod(t.path.c_str(), 0755), 0);
  const std::string bin = t.path + "/hydroctl";
  ASSERT_EQ(run("cp " + std::string(HYDROCTL_BIN) + " " + bin).code, 0);
  pid_t victim = ::fork();
  if (victim == 0) {
    ::pause();
    ::_exit(0);
  }
  Output o = run("runuser -u nobody -- " + bin + " pause --pid " + std::to_string(victim));
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.text,
            "hydroctl: process " + std::to_string(victim) + " belongs to uid 0; only its owner or root may pause it\n");
  ::kill(victim, SIGKILL);
  ::waitpid(victim, nullptr, 0);
}

TEST(Hydroctl, BadArgumentsAreClearErrors) {
  const std::string bin = HYDROCTL_BIN;
  Output o = run(bin + " pause");
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.text, "hydroctl: pause: give a JOBID or --pid PID\n");
  o = run(bin + " resume 12x");
  EXPECT_EQ(o.text, "hydroctl: JOBID '12x' is not a job id\n");
  o = run(bin + " pause 12 --pid 5");
  EXPECT_EQ(o.text, "hydroctl: give a JOBID or --pid, not both\n");
  o = run(bin + " pause --pid 999999999");
  EXPECT_EQ(o.text, "hydroctl: no process 999999999\n");
  o = run(bin + " status");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.text.find("DIR|JOBID is required"), std::string::npos) << o.text;
}

TEST(HydroctlJob, ParsesTheOwnerFromScontrol) {
  ctl::JobOwner o;
  ASSERT_TRUE(ctl::parse_job_owner("JobId=7 JobName=wrap\n   UserId=alice(1001) GroupId=alice(1001)\n", "7", &o).ok());
  EXPECT_EQ(o.user, "alice");
  EXPECT_EQ(o.uid, 1001u);
  // A job named to look like another owner does not pass for it.
  ASSERT_TRUE(
      ctl::parse_job_owner("JobId=8 JobName=UserId=root(0)\n   UserId=mallory(1002) GroupId=m(1002)\n", "8", &o).ok());
  EXPECT_EQ(o.user, "mallory");
  EXPECT_EQ(o.uid, 1002u);
  EXPECT_EQ(ctl::parse_job_owner("slurm_load_jobs error: Invalid job id specified\n", "7", &o).message(),
            "job 7: Slurm does not know it (scontrol show job 7)");
}

// A stand-in scontrol that prints what Slurm would for job 42 owned by uid 4242 (the real one is
// tested on a real Slurm in tests/integration/hydroctl.sh).
std::string fake_scontrol(const std::string& dir, const std::string& owner) {
  std::string path = dir + "/scontrol";
  std::ofstream(path) << "#!/bin/sh\necho 'JobId=42 JobName=train'\necho '   UserId=" << owner << " GroupId=x(1)'\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

TEST(HydroctlJob, AnotherUsersJobIsRefusedBeforeSlurmIsAsked) {
  ASSERT_EQ(::getuid(), 0u) << "this test runs hydroctl as the user nobody, which needs root";
  test::TempDir t;
  ASSERT_EQ(::chmod(t.path.c_str(), 0755), 0);
  const std::string bin = t.path + "/hydroctl";
  ASSERT_EQ(run("cp " + std::string(HYDROCTL_BIN) + " " + bin).code, 0);
  std::string scontrol = fake_scontrol(t.path, "alice(4242)");
  // scancel would succeed: the refusal must be hydroctl's own.
  Output o = run("runuser -u nobody -- " + bin + " --scontrol " + scontrol + " --scancel /bin/true checkpoint 42");
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.text, "hydroctl: job 42 belongs to alice (uid 4242); only its owner or root may checkpoint it\n");
}

TEST(HydroctlJob, StatusOfAJobFindsItsDirectoryFromTheAdminTemplate) {
  test::TempDir t;
  std::string scontrol = fake_scontrol(t.path, "alice(4242)");
  std::string yaml = t.path + "/hydro.yaml";
  std::ofstream(yaml) << "checkpoint_dir: " << t.path << "/ckpt/%u/%j\n";
  ASSERT_TRUE(posix_fs().make_dirs(t.path + "/ckpt/alice/42", 0700).ok());
  Output o = run(std::string(HYDROCTL_BIN) + " --scontrol " + scontrol + " --config " + yaml + " status 42");
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_EQ(o.text.rfind("job 42: " + t.path + "/ckpt/alice/42\n", 0), 0u) << o.text;
  o = run(std::string(HYDROCTL_BIN) + " --scontrol " + scontrol + " --config " + t.path + "/none.yaml status 42");
  EXPECT_EQ(o.text, "hydroctl: " + t.path + "/none.yaml: cannot read the hydro config: No such file or directory\n");
}

// The verbs follow the job's signal map: a process's own HYDRO_SIGNALS, the admin's signals:, or
// --signals (hydroctl's own HYDRO_SIGNALS is left out here: it sits between the two).
TEST(HydroctlSignals, TheVerbsSendWhatTheJobsSignalMapNames) {
  test::TempDir t;
  pid_t child = ::fork();
  if (child == 0) {
    ::setenv("HYDRO_SIGNALS", "pause=TSTP,PWR", 1);
    ::execl(
        "/bin/bash", "bash", "-c",
        ("trap 'echo pwr > " + t.path + "/log; exit 0' PWR; touch " + t.path + "/ready; while :; do sleep 0.01; done")
            .c_str(),
        static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_TRUE(test::eventually([&] { return posix_fs().exists(t.path + "/ready"); }));
  const std::string bin = "env -u HYDRO_SIGNALS " + std::string(HYDROCTL_BIN);
  Output o = run(bin + " pause --pid " + std::to_string(child));
  EXPECT_EQ(o.text, "hydroctl: sent SIGPWR to process " + std::to_string(child) + " (pause)\n");
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  std::string scontrol = fake_scontrol(t.path, "root(0)");
  std::string scancel = t.path + "/scancel";
  std::ofstream(scancel) << "#!/bin/sh\necho \"$@\" >> " << t.path << "/scancel.args\n";
  ::chmod(scancel.c_str(), 0755);
  std::string yaml = t.path + "/hydro.yaml";
  std::ofstream(yaml) << "signals: \"pause=PWR;resume=URG\"\n";
  const std::string job = bin + " --scontrol " + scontrol + " --scancel " + scancel + " --config " + yaml;
  o = run(job + " resume 42");
  EXPECT_EQ(o.text, "hydroctl: sent SIGURG to job 42 (resume)\n");
  // Every step, then the batch shell.
  const std::string sig = "--signal=" + std::to_string(SIGURG);
  EXPECT_EQ(slurp(t.path + "/scancel.args"), sig + " 42\n--batch " + sig + " 42\n");
  o = run(job + " --signals 'checkpoint=' checkpoint 42");
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.text, "hydroctl: --signals gives checkpoint no signal\n");
  o = run(job + " --signals 'pause=11' pause 42");
  EXPECT_EQ(o.text.rfind("hydroctl: --signals: signal 11 reports a fault", 0), 0u) << o.text;
}

TEST(Hydroctl, CheckpointSendsWinch) {
  pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGWINCH, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGWINCH);
    ::sigprocmask(SIG_BLOCK, &set, nullptr);
    int sig = 0;
    ::sigwait(&set, &sig);
    ::_exit(sig == SIGWINCH ? 0 : 1);
  }
  Output o;
  int status = 0;
  // The child may not have blocked WINCH yet; its default action is to ignore it, so resend.
  ASSERT_TRUE(test::eventually([&] {
    o = run(std::string(HYDROCTL_BIN) + " checkpoint --pid " + std::to_string(child));
    return ::waitpid(child, &status, WNOHANG) == child;
  }));
  EXPECT_EQ(o.text, "hydroctl: sent SIGWINCH to process " + std::to_string(child) + " (checkpoint)\n");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace hydro
