// The Runtime's side of the readiness handshake with hydro-launch (hydro/launch_ready.h).
#include "hydro/launch_ready.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace hydro {
namespace {

TEST(LaunchReady, WritesOneByteClosesTheDescriptorAndUnsetsTheVariable) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ::setenv(kLaunchReadyEnv, std::to_string(p[1]).c_str(), 1);
  tell_launcher_ready();
  EXPECT_EQ(std::getenv(kLaunchReadyEnv), nullptr);
  char buf[4];
  EXPECT_EQ(::read(p[0], buf, sizeof buf), 1);
  EXPECT_EQ(buf[0], 'r');
  EXPECT_EQ(::read(p[0], buf, sizeof buf), 0) << "the write end is closed: EOF";
  EXPECT_EQ(::fcntl(p[1], F_GETFD), -1);
  ::close(p[0]);
  tell_launcher_ready();  // a second call (another Runtime) does nothing
}

TEST(LaunchReady, NeverWritesIntoADescriptorThatIsNotAWriteEnd) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  for (const std::string& bad : std::vector<std::string>{"", "x", "2", "-5", "12abc", std::to_string(p[0])}) {
    ::setenv(kLaunchReadyEnv, bad.c_str(), 1);
    tell_launcher_ready();
    if (!bad.empty()) EXPECT_EQ(std::getenv(kLaunchReadyEnv), nullptr) << bad;
  }
  ::unsetenv(kLaunchReadyEnv);
  EXPECT_NE(::fcntl(p[0], F_GETFD), -1) << "the read end was left alone";
  ::close(p[1]);
  char c;
  EXPECT_EQ(::read(p[0], &c, 1), 0) << "nothing was written";
  ::close(p[0]);
}

}  // namespace
}  // namespace hydro
