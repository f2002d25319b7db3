// The ranks' store over TCP, with munged running (ctest's "munge" fixture starts it): what ranks
// of one job step can do, and that nobody else (another uid, another job step, a peer that does
// not speak MUNGE, a server of another uid) can read, change or impersonate it.
#include <arpa/inet.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../../runtime/store/munge_auth.h"
#include "hydro/tcp_store.h"

namespace hydro {
namespace {

using std::chrono::milliseconds;
const std::string kScope = "job 1 step 0";

// A copy of the probe that uid nobody can run, wherever the build tree is (a 0700 home, say).
const std::string& reachable_probe() {
  struct Copy {
    std::string dir, bin;
    Copy() {
      char tmpl[] = "/tmp/hydro-store-probe.XXXXXX";
      dir = ::mkdtemp(tmpl);
      ::chmod(dir.c_str(), 0755);
      bin = dir + "/probe";
      if (std::system(("cp " + std::string(HYDRO_STORE_PROBE_BIN) + " " + bin).c_str()) != 0)
        bin = HYDRO_STORE_PROBE_BIN;
    }
    ~Copy() { (void)std::system(("rm -rf " + dir).c_str()); }
  };
  static Copy copy;
  return copy.bin;
}

// Runs the probe (as `uid`), returns its exit code and output.
int probe(uid_t uid, const std::string& args, std::string* out) {
  std::string cmd = reachable_probe() + " " + args + " 2>&1";
  if (uid != 0)
    cmd = "setpriv --reuid=" + std::to_string(uid) + " --regid=" + std::to_string(uid) + " --clear-groups " + cmd;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::array<char, 512> buf;
  out->clear();
  while (std::fgets(buf.data(), buf.size(), p)) *out += buf.data();
  int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

class TcpStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string cred;
    Status s = munge_seal("probe", &cred);
    ASSERT_TRUE(s.ok()) << s.message() << " -- ctest starts munged (fixture munge); by hand: scripts/slurm-local munge";
  }
  void SetUp() override {
    ASSERT_TRUE(TcpStoreServer::start(0, kScope, &server_).ok());
    ASSERT_TRUE(connect_tcp_store("127.0.0.1", server_->port(), kScope, milliseconds(5000), &a_).ok());
    ASSERT_TRUE(connect_tcp_store("localhost", server_->port(), kScope, milliseconds(5000), &b_).ok());
  }
  std::string port() const { return std::to_string(server_->port()); }
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<RankStore> a_, b_;
};

TEST_F(TcpStoreTest, RanksOfOneJobStepShareKeysAndCounters) {
  ASSERT_TRUE(a_->set("k", std::string("v\0w", 3)).ok());
  std::string v;
  ASSERT_TRUE(b_->get("k", milliseconds(1000), &v).ok());
  EXPECT_EQ(v, std::string("v\0w", 3));
  int64_t n = 0;
  ASSERT_TRUE(a_->add("c", 3, &n).ok());
  ASSERT_TRUE(b_->add("c", -1, &n).ok());
  EXPECT_EQ(n, 2);
  ASSERT_TRUE(a_->get("c", milliseconds(1000), &v).ok());
  EXPECT_EQ(v, "2");
  ASSERT_TRUE(b_->remove("k").ok());
  EXPECT_EQ(a_->get("k", milliseconds(50), &v).code(), Code::not_found);
}

TEST_F(TcpStoreTest, AGetWaitsForTheKeyOrTimesOut) {
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(200));
    ASSERT_TRUE(b_->set("late", "x").ok());
  });
  std::string v;
  Status s = a_->get("late", milliseconds(30000), &v);
  later.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(v, "x");
  s = a_->get("never", milliseconds(100), &v);
  EXPECT_EQ(s.code(), Code::not_found);
  EXPECT_EQ(s.message(), "timeout waiting for never");
}

TEST_F(TcpStoreTest, AGetAllWaitsForEveryKeyOrReturnsTheOnesSet) {
  ASSERT_TRUE(a_->set("first", "1").ok());
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(200));
    ASSERT_TRUE(b_->set("other", "not waited for").ok());
    ASSERT_TRUE(b_->set("second", std::string("2\0", 2)).ok());
  });
  std::vector<std::optional<std::string>> v;
  Status s = a_->get_all({"first", "second"}, milliseconds(30000), &v);
  later.join();
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], "1");
  EXPECT_EQ(v[1], std::string("2\0", 2));
  ASSERT_TRUE(a_->set("empty", "").ok());
  s = a_->get_all({"never", "empty", "nor this"}, milliseconds(100), &v);
  EXPECT_EQ(s.code(), Code::not_found);
  EXPECT_EQ(s.message(), "timeout waiting for never");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_FALSE(v[0].has_value());
  EXPECT_EQ(v[1], "");
  EXPECT_FALSE(v[2].has_value());
  ASSERT_TRUE(a_->get_all({}, milliseconds(0), &v).ok());
  EXPECT_TRUE(v.empty());
}

// Slurm's suspend stops every process of the step, the store's server with the rank that waits on
// it. Stopped for twice a get's timeout, then continued, the get goes on and takes the key set
// after the resume: its wait counts running time only. (With wall-clock deadlines it timed out.)
// The get runs about 0.4 s of its 2 s: a stall of over a second would be needed to fail it.
// Its store lives in a child that the test stops: the parent starts no thread before the fork (a
// child forked from threads cannot start its own under ThreadSanitizer, scripts/sanitize).
class TcpStoreForkTest : public TcpStoreTest {
 protected:
  void SetUp() override {}
};

TEST_F(TcpStoreForkTest, AGetStoppedLongerThanItsTimeoutGoesOnAfterTheResume) {
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);  // a parent that is gone gives EOF on `go`, not a wait for ever
    ::close(go[1]);
    std::unique_ptr<TcpStoreServer> server;
    std::unique_ptr<RankStore> a, b;
    if (!TcpStoreServer::start(0, kScope, &server).ok() ||
        !connect_tcp_store("127.0.0.1", server->port(), kScope, milliseconds(5000), &a).ok() ||
        !connect_tcp_store("127.0.0.1", server->port(), kScope, milliseconds(5000), &b).ok())
      ::_exit(2);
    std::thread setter([&] {
      char c;
      if (::read(go[0], &c, 1) == 1) (void)b->set("late", "x");
    });
    (void)!::write(ready[1], "r", 1);
    std::string v;
    Status s = a->get("late", milliseconds(2000), &v);
    setter.join();
    ::_exit(s.ok() && v == "x" ? 0 : 1);
  }
  ::close(ready[1]);  // a child that dies before it is ready gives EOF here, not a hang
  ::close(go[0]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the child ended before it was ready";
  std::this_thread::sleep_for(milliseconds(100));
  ::kill(pid, SIGSTOP);
  std::this_thread::sleep_for(milliseconds(4000));
  ::kill(pid, SIGCONT);
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  for (int fd : {ready[0], go[1]}) ::close(fd);
}

// The attack of issue 15: uid nobody cannot add to a vote counter, whether it uses hydro's client
// (which gives up on seeing the server's uid) or sends its own valid MUNGE credential regardless.
TEST_F(TcpStoreTest, AnotherUidIsRefusedAndChangesNothing) {
  ASSERT_EQ(::geteuid(), 0u) << "this test runs a client as uid nobody: run it as root";
  std::string out;
  EXPECT_EQ(probe(65534, "connect 127.0.0.1 " + port() + " '" + kScope + "'", &out), 1) << out;
  EXPECT_NE(out.find("refused the server running as uid 0"), std::string::npos) << out;
  EXPECT_EQ(probe(65534, "attack 127.0.0.1 " + port() + " '" + kScope + "'", &out), 1) << out;
  EXPECT_NE(out.find("refused: "), std::string::npos) << out;
  std::string v;
  EXPECT_EQ(a_->get("probe", milliseconds(0), &v).code(), Code::not_found);
  EXPECT_EQ(a_->get("hydro/0/vote", milliseconds(0), &v).code(), Code::not_found);
  // The same attack from the job's own uid gets in: the uid is what kept nobody out.
  EXPECT_EQ(probe(0, "attack 127.0.0.1 " + port() + " '" + kScope + "'", &out), 0) << out;
  ASSERT_TRUE(a_->get("hydro/0/vote", milliseconds(0), &v).ok());
  // The job's own ranks are not disturbed.
  ASSERT_TRUE(a_->set("after", "ok").ok());
  ASSERT_TRUE(b_->get("after", milliseconds(1000), &v).ok());
}

// Two steps (or two jobs whose ports collide) never share a store: the wrong one is told why.
TEST_F(TcpStoreTest, AnotherJobStepOfTheSameUserIsRefusedNamingBoth) {
  std::string out;
  EXPECT_EQ(probe(0, "connect 127.0.0.1 " + port() + " 'job 2 step 0'", &out), 1) << out;
  EXPECT_NE(out.find("refused this rank: this store serves job 1 step 0, not job 2 step 0"), std::string::npos) << out;
  std::string v;
  EXPECT_EQ(a_->get("probe", milliseconds(0), &v).code(), Code::not_found);
}

// A peer that does not speak MUNGE (torch's TCPStore client, a port scanner) is disconnected.
TEST_F(TcpStoreTest, APeerWithoutACredentialIsDisconnected) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const char junk[] = "\x05\x00\x00\x00Ahydro/0/vote\x0c\x00\x00\x00\x00\x00\x00\x00";
  ::send(fd, junk, sizeof junk, MSG_NOSIGNAL);
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) {
  }
  EXPECT_LE(n, 0) << "the server closes (or resets) the connection";
  ::close(fd);
  std::string v;
  EXPECT_EQ(a_->get("hydro/0/vote", milliseconds(0), &v).code(), Code::not_found);
}

// Someone else serving the port (bound first, or a relay): the rank refuses to talk to it.
TEST(TcpStoreImpostor, AServerOfAnotherUidIsRefused) {
  ASSERT_EQ(::geteuid(), 0u) << "this test runs a server as uid nobody: run it as root";
  std::string cmd =
      "setpriv --reuid=65534 --regid=65534 --clear-groups " + reachable_probe() + " serve '" + kScope + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  int port = 0;
  ASSERT_EQ(std::fscanf(p, "%d", &port), 1);
  std::unique_ptr<RankStore> store;
  Status s = connect_tcp_store("127.0.0.1", port, kScope, milliseconds(5000), &store);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("refused the server running as uid 65534"), std::string::npos) << s.message();
  ::pclose(p);
}

}  // namespace
}  // namespace hydro
