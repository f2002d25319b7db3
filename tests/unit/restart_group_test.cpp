// hydro-launch --restarts in a step of several tasks: every task's program restarts together. Two
// hydro-launch processes stand for the two tasks of one step (their Slurm environment set by
// hand), meeting in the restart group's MUNGE-authenticated store (needs munged: the "munge"
// fixture).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <random>

#include "fault_fs.h"
#include "spawn_launcher.h"

namespace hydro {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// A MASTER_PORT whose port + 2 (the restart group's) is free now. Picked at random in 10000-19999,
// below the kernel's ephemeral range (where a connection's local port could take it before the
// launchers bind) and below the ports hydro derives for Slurm jobs; as tests/python/conftest.py's
// free_port.
int master_port() {
  std::random_device rd;
  std::uniform_int_distribution<int> pick(10000, 19997);
  for (int i = 0; i < 1000; ++i) {
    const int port = pick(rd);
    if (bindable(port + 2)) return port;
  }
  ADD_FAILURE() << "no free TCP port in 10002-19999";
  return 0;
}

std::vector<std::string> task_env(int rank, int port) {
  return {"SLURM_JOB_ID=4242",
          "SLURM_STEP_ID=0",
          "SLURM_PROCID=" + std::to_string(rank),
          "SLURM_LOCALID=" + std::to_string(rank),
          "SLURM_STEP_NUM_TASKS=2",
          "SLURM_RESTART_COUNT=0",
          "MASTER_ADDR=127.0.0.1",
          "MASTER_PORT=" + std::to_string(port)};
}

// Each program records the generations it ran in DIR/ran.RANK, and in generation 0 waits until
// the other task's program has too: however late either starts, each has run generation 0.
std::string records_generation(const std::string& dir) {
  return "echo \"gen${HYDRO_RESTART_GENERATION:-0}\" >> " + dir +
         "/ran.$SLURM_PROCID; "
         "[ \"${HYDRO_RESTART_GENERATION:-0}\" = 1 ] && exit 0; " +
         test::until_true("[ -s " + dir + "/ran.$((1 - SLURM_PROCID)) ]");
}

// Generation 0: task 1's program fails, task 0's trains on (sleeps) until it is killed.
// Generation 1: both end cleanly.
std::string program(const std::string& dir) {
  return records_generation(dir) + "[ \"$SLURM_PROCID\" = 1 ] && exit 3; exec sleep 1000";
}

TEST(RestartGroup, AFailedTaskRestartsEveryTasksProgramTogetherInTheSameAllocation) {
  test::TempDir t;
  const int port = master_port();
  pid_t pids[2];
  for (int rank : {0, 1})
    pids[rank] = test::spawn_launcher({"--restarts", "2", "--", "/bin/sh", "-c", program(t.path)}, task_env(rank, port),
                                      t.path + "/launcher" + std::to_string(rank) + ".err");
  int status[2];
  for (int rank : {0, 1}) ::waitpid(pids[rank], &status[rank], 0);
  const std::string err0 = slurp(t.path + "/launcher0.err"), err1 = slurp(t.path + "/launcher1.err");
  EXPECT_EQ(WEXITSTATUS(status[0]), 0) << err0;
  EXPECT_EQ(WEXITSTATUS(status[1]), 0) << err1;
  EXPECT_EQ(slurp(t.path + "/ran.0"), "gen0\ngen1\n") << err0;
  EXPECT_EQ(slurp(t.path + "/ran.1"), "gen0\ngen1\n") << err1;
  const std::string call = "rank 1: the program exited with status 3; restart 1 of --restarts 2 (generation 1)";
  EXPECT_NE(err1.find("generation 1 called (" + call), std::string::npos) << err1;
  EXPECT_NE(err0.find("the next generation was called (" + call), std::string::npos) << err0;
  for (const std::string* err : {&err0, &err1})
    EXPECT_NE(err->find("every task's program of generation 0 has ended: starting generation 1"), std::string::npos)
        << *err;
  EXPECT_EQ(err0.find("requeue"), std::string::npos) << err0;
}

// Both tasks' programs fail at once (each exits with its own status): both call generation 1, the
// first call stands, and both restart under it.
TEST(RestartGroup, TwoTasksThatFailAtOnceAgreeOnOneCall) {
  test::TempDir t;
  const int port = master_port();
  const std::string both_fail = records_generation(t.path) + "exit $((3 + SLURM_PROCID))";
  pid_t pids[2];
  for (int rank : {0, 1})
    pids[rank] = test::spawn_launcher({"--restarts", "1", "--", "/bin/sh", "-c", both_fail}, task_env(rank, port),
                                      t.path + "/launcher" + std::to_string(rank) + ".err");
  std::string standing[2];
  for (int rank : {0, 1}) {
    int status = 0;
    ::waitpid(pids[rank], &status, 0);
    const std::string err = slurp(t.path + "/launcher" + std::to_string(rank) + ".err");
    EXPECT_EQ(WEXITSTATUS(status), 0) << err;
    EXPECT_EQ(slurp(t.path + "/ran." + std::to_string(rank)), "gen0\ngen1\n") << err;
    const std::string said = "called (rank ";  // made this call, or followed it
    const size_t at = err.find(said);
    ASSERT_NE(at, std::string::npos) << err;
    standing[rank] = err.substr(at + said.size(), err.find(')', at) - at - said.size());
  }
  EXPECT_EQ(standing[0], standing[1]) << "the two tasks restarted under different calls";
}

}  // namespace
}  // namespace hydro
