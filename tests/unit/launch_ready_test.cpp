// The Runtime's side of the readiness handshake with hydro-launch (hydro/launch_ready.h).
#include "hydro/launch_ready.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace hydro {
namespace {

std::string inode_of(int fd) {
  struct stat st;
  EXPECT_EQ(::fstat(fd, &st), 0);
  return std::to_string(st.st_ino);
}

void offer(int fd, const std::string& ino) {
  ::setenv(kLaunchReadyEnv, std::to_string(fd).c_str(), 1);
  ::setenv(kLaunchReadyInoEnv, ino.c_str(), 1);
}

std::string read_all(int fd) {
  char buf[16];
  ssize_t n = ::read(fd, buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Up, closed, up again (a second Runtime of the same process): one byte each, on the pipe the
// first call took; the variables are gone, and a program it runs does not inherit the pipe.
TEST(LaunchReady, SaysUpAndClosedOnThePipeItTookForEveryRuntimeOfTheProcess) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  offer(p[1], inode_of(p[1]));
  tell_launcher_ready();
  EXPECT_EQ(std::getenv(kLaunchReadyEnv), nullptr);
  EXPECT_EQ(std::getenv(kLaunchReadyInoEnv), nullptr);
  EXPECT_EQ(read_all(p[0]), std::string(1, kRuntimeUp));
  EXPECT_EQ(::fcntl(p[1], F_GETFD), FD_CLOEXEC);
  tell_launcher_closed();
  tell_launcher_ready();
  tell_launcher_closed();
  EXPECT_EQ(read_all(p[0]), (std::string{kRuntimeClosed, kRuntimeUp, kRuntimeClosed}));
  ::close(p[0]);
  tell_launcher_ready();  // the reader is gone: no SIGPIPE, and the pipe is closed
  EXPECT_EQ(::fcntl(p[1], F_GETFD), -1);
  tell_launcher_closed();
}

// A forked child (a DataLoader worker) inherits the descriptor, and speaks for nobody.
TEST(LaunchReady, AForkedChildWritesNothing) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  offer(p[1], inode_of(p[1]));
  tell_launcher_ready();
  EXPECT_EQ(read_all(p[0]), std::string(1, kRuntimeUp));
  pid_t pid = ::fork();
  if (pid == 0) {
    tell_launcher_closed();
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  tell_launcher_closed();
  EXPECT_EQ(read_all(p[0]), std::string(1, kRuntimeClosed));
  ::close(p[0]);
}

TEST(LaunchReady, AReaderThatIsGoneRaisesNoSigpipe) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ::close(p[0]);
  offer(p[1], inode_of(p[1]));
  tell_launcher_ready();  // SIGPIPE's default action would end this test program
  EXPECT_EQ(::fcntl(p[1], F_GETFD), -1);
}

TEST(LaunchReady, NeverWritesIntoADescriptorThatIsNotThatPipesWriteEnd) {
  int p[2], other[2];
  ASSERT_EQ(::pipe(p), 0);
  ASSERT_EQ(::pipe(other), 0);
  const std::string ino = inode_of(p[1]);
  struct Case {
    std::string fd, ino;
  };
  std::vector<Case> cases = {{"", ino},
                             {"x", ino},
                             {"2", ino},
                             {"-5", ino},
                             {"12abc", ino},
                             {std::to_string(p[1]), ""},
                             {std::to_string(p[0]), ino},       // the read end
                             {std::to_string(other[1]), ino}};  // a reused number: another pipe
  for (const auto& c : cases) {
    ::setenv(kLaunchReadyEnv, c.fd.c_str(), 1);
    ::setenv(kLaunchReadyInoEnv, c.ino.c_str(), 1);
    tell_launcher_ready();
    EXPECT_EQ(std::getenv(kLaunchReadyEnv), nullptr) << c.fd;
  }
  for (int fd : {p[0], p[1], other[0], other[1]}) EXPECT_NE(::fcntl(fd, F_GETFD), -1) << "left open: " << fd;
  ::close(p[1]);
  ::close(other[1]);
  char c;
  EXPECT_EQ(::read(p[0], &c, 1), 0) << "nothing was written";
  EXPECT_EQ(::read(other[0], &c, 1), 0) << "nothing was written";
  ::close(p[0]);
  ::close(other[0]);
}

// hydro-launch binds the report socket and the workers send to it through one address: a path
// that does not fit is refused, never cut short into another path.
TEST(LaunchReady, TheReportSocketsAddressIsThePathWholeOrNone) {
  sockaddr_un addr;
  const std::string fits(sizeof addr.sun_path - 1, 'a');
  ASSERT_TRUE(launch_socket_address(fits, &addr));
  EXPECT_EQ(addr.sun_family, AF_UNIX);
  EXPECT_EQ(std::string(addr.sun_path), fits);
  EXPECT_FALSE(launch_socket_address(fits + "b", &addr));
  EXPECT_FALSE(launch_socket_address("", &addr));
}

}  // namespace
}  // namespace hydro
