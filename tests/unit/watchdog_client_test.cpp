// hydro::WatchdogClient and ScopedTimer: the lines they write into the FIFO.
#include "hydro/watchdog_client.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>

#include "fault_fs.h"
#include "hydro/timer_table.h"

namespace hydro {
namespace {

// A FIFO with this test as its reader.
struct Fifo {
  explicit Fifo(const std::string& p) : path(p) {
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0);
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
    EXPECT_GE(fd, 0);
  }
  ~Fifo() { ::close(fd); }
  std::string read_all() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }
  std::string path;
  int fd;
};

double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

TEST(WatchdogClient, ArmAndDisarmWriteTorchFileTimerRequests) {
  test::TempDir t;
  Fifo fifo(t.path + "/timers");
  WatchdogClient c(fifo.path);
  ASSERT_TRUE(c.enabled());
  double before = wall_now();
  ASSERT_TRUE(c.arm("train step", 30).ok());
  ASSERT_TRUE(c.disarm("train step").ok());
  std::string text = fifo.read_all();
  size_t nl = text.find('\n');
  ASSERT_NE(nl, std::string::npos) << text;
  ASSERT_EQ(text.back(), '\n');
  TimerRequest arm, release;
  ASSERT_TRUE(parse_timer_request(text.substr(0, nl), &arm).ok()) << text;
  ASSERT_TRUE(parse_timer_request(text.substr(nl + 1, text.size() - nl - 2), &release).ok()) << text;
  EXPECT_EQ(arm.pid, ::getpid());
  EXPECT_EQ(arm.scope_id, "train step");
  EXPECT_EQ(arm.signal, SIGKILL);
  EXPECT_GE(arm.expiration_time, before + 30);
  EXPECT_LT(arm.expiration_time, before + 60);
  EXPECT_EQ(text.substr(nl + 1), "{\"version\":1,\"pid\":" + std::to_string(::getpid()) +
                                     ",\"scope_id\":\"train step\",\"expiration_time\":-1,\"signal\":0}\n");
}

TEST(WatchdogClient, ScopedTimerArmsThenDisarms) {
  test::TempDir t;
  Fifo fifo(t.path + "/timers");
  WatchdogClient c(fifo.path, SIGTERM);
  {
    ScopedTimer timer(c, "save", 5);
    EXPECT_TRUE(timer.status().ok()) << timer.status().to_string();
    std::string armed = fifo.read_all();
    EXPECT_NE(armed.find("\"scope_id\":\"save\""), std::string::npos) << armed;
    EXPECT_NE(armed.find("\"signal\":15"), std::string::npos) << armed;
    EXPECT_EQ(armed.find("\"expiration_time\":-1"), std::string::npos) << armed;
  }
  EXPECT_NE(fifo.read_all().find("\"scope_id\":\"save\",\"expiration_time\":-1"), std::string::npos);
}

TEST(WatchdogClient, ScopedTimerRearmsWithNoDisarmBetween) {
  test::TempDir t;
  Fifo fifo(t.path + "/timers");
  WatchdogClient c(fifo.path, SIGTERM);
  {
    ScopedTimer timer(c, "step", 5);
    fifo.read_all();
    EXPECT_TRUE(timer.rearm(7).ok());
    std::string rearmed = fifo.read_all();
    EXPECT_EQ(std::count(rearmed.begin(), rearmed.end(), '\n'), 1) << rearmed;  // one request: the arm
    EXPECT_NE(rearmed.find("\"scope_id\":\"step\""), std::string::npos) << rearmed;
    EXPECT_EQ(rearmed.find("\"expiration_time\":-1"), std::string::npos) << rearmed;
  }
  EXPECT_NE(fifo.read_all().find("\"scope_id\":\"step\",\"expiration_time\":-1"), std::string::npos);
}

TEST(WatchdogClient, ReadsItsFifoFromTheEnvironmentAndIsANoOpWithout) {
  const char* h = std::getenv("HYDRO_WATCHDOG_FILE");
  const char* te = std::getenv("TORCHELASTIC_TIMER_FILE");
  std::string saved_h = h ? h : "", saved_te = te ? te : "";
  ::unsetenv("HYDRO_WATCHDOG_FILE");
  ::unsetenv("TORCHELASTIC_TIMER_FILE");
  {
    WatchdogClient off;
    EXPECT_FALSE(off.enabled());
    EXPECT_TRUE(off.arm("x", 1).ok());
    EXPECT_TRUE(off.disarm("x").ok());
    ScopedTimer timer(off, "x", 1);
    EXPECT_TRUE(timer.status().ok());
  }
  ::setenv("TORCHELASTIC_TIMER_FILE", "/from/torch", 1);
  EXPECT_EQ(WatchdogClient().path(), "/from/torch");
  ::setenv("HYDRO_WATCHDOG_FILE", "/from/hydro", 1);
  EXPECT_EQ(WatchdogClient().path(), "/from/hydro") << "HYDRO_WATCHDOG_FILE wins";
  if (h)
    ::setenv("HYDRO_WATCHDOG_FILE", saved_h.c_str(), 1);
  else
    ::unsetenv("HYDRO_WATCHDOG_FILE");
  if (te)
    ::setenv("TORCHELASTIC_TIMER_FILE", saved_te.c_str(), 1);
  else
    ::unsetenv("TORCHELASTIC_TIMER_FILE");
}

TEST(WatchdogClient, ErrorsNameTheFifo) {
  test::TempDir t;
  const std::string path = t.path + "/timers";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);  // nobody reads it
  WatchdogClient c(path);
  Status st = c.arm("step", 10);
  EXPECT_EQ(st.code(), Code::io);
  EXPECT_EQ(st.message(),
            "watchdog file " + path + " (no hydro-launch --watchdog-file is reading it): No such device or address");
  st = WatchdogClient(t.path + "/missing").arm("step", 10);
  EXPECT_EQ(st.code(), Code::not_found);
  EXPECT_EQ(st.message(), "watchdog file " + t.path + "/missing: No such file or directory");
  st = c.arm("step", 0);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_EQ(st.message(), "watchdog timer 'step': 0 s is not a positive number of seconds");
  Fifo fifo(t.path + "/read");
  st = WatchdogClient(fifo.path).arm(std::string(PIPE_BUF, 'x'), 10);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_EQ(st.message().rfind("watchdog file " + fifo.path + ": request longer than " + std::to_string(PIPE_BUF) +
                                   " bytes (shorten the scope_id): {",
                               0),
            0u)
      << st.message();
  EXPECT_EQ(fifo.read_all(), "") << "nothing partial was written";
}

}  // namespace
}  // namespace hydro
