// The Runtime's side of the readiness handshake with hydro-launch (hydro/launch_ready.h).
#include "hydro/launch_ready.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
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

TEST(LaunchReady, WritesOneByteClosesTheDescriptorAndUnsetsTheVariables) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  offer(p[1], inode_of(p[1]));
  tell_launcher_ready();
  EXPECT_EQ(std::getenv(kLaunchReadyEnv), nullptr);
  EXPECT_EQ(std::getenv(kLaunchReadyInoEnv), nullptr);
  char buf[4];
  EXPECT_EQ(::read(p[0], buf, sizeof buf), 1);
  EXPECT_EQ(buf[0], 'r');
  EXPECT_EQ(::read(p[0], buf, sizeof buf), 0) << "the write end is closed: EOF";
  EXPECT_EQ(::fcntl(p[1], F_GETFD), -1);
  ::close(p[0]);
  tell_launcher_ready();  // a second call (another Runtime) does nothing
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

}  // namespace
}  // namespace hydro
