#include <gtest/gtest.h>
#include <signal.h>

#include "hydro/signal_map.h"

namespace hydro {
namespace {

Action action_of(const SignalMap& m, int signo) {
  Action a{};
  EXPECT_TRUE(m.lookup(signo, &a)) << signal_name(signo);
  return a;
}

TEST(SignalMap, DefaultsAreHydroJobScheAndSlurm) {
  SignalMap m = SignalMap::defaults();
  EXPECT_EQ(action_of(m, SIGTSTP), Action::pause);
  EXPECT_EQ(action_of(m, SIGUSR1), Action::pause);
  EXPECT_EQ(action_of(m, SIGCONT), Action::resume);
  EXPECT_EQ(action_of(m, SIGUSR2), Action::resume);
  EXPECT_EQ(action_of(m, SIGTERM), Action::checkpoint_exit);
  EXPECT_EQ(action_of(m, SIGWINCH), Action::checkpoint);
  EXPECT_EQ(m.entries().size(), 6u);
}

TEST(SignalMap, AnActionNamedReplacesItsDefaults) {
  SignalMap m;
  ASSERT_TRUE(SignalMap::parse("pause=TSTP,SIGURG", "HYDRO_SIGNALS", &m).ok());
  Action a;
  EXPECT_FALSE(m.lookup(SIGUSR1, &a)) << "moving off SIGUSR1 (NCCL's) must be possible";
  EXPECT_EQ(action_of(m, SIGURG), Action::pause);
  EXPECT_EQ(action_of(m, SIGUSR2), Action::resume);
}

TEST(SignalMap, EmptyListTurnsAnActionOff) {
  SignalMap m;
  ASSERT_TRUE(SignalMap::parse("pause=;resume=;checkpoint=", "X", &m).ok());
  EXPECT_EQ(m.entries().size(), 1u);
  EXPECT_EQ(action_of(m, SIGTERM), Action::checkpoint_exit);
}

TEST(SignalMap, BadSpecsNameTheSetting) {
  SignalMap m;
  Status s = SignalMap::parse("pause=BANANA", "HYDRO_SIGNALS", &m);
  EXPECT_EQ(s.message(), "HYDRO_SIGNALS: unknown signal 'BANANA'");
  s = SignalMap::parse("nap=USR1", "HYDRO_SIGNALS", &m);
  EXPECT_EQ(s.message(), "HYDRO_SIGNALS: unknown action 'nap' (expected pause, resume, checkpoint_exit or checkpoint)");
  s = SignalMap::parse("pause", "HYDRO_SIGNALS", &m);
  EXPECT_EQ(s.message(), "HYDRO_SIGNALS: 'pause' is not ACTION=SIGNAL[,SIGNAL...]");
  s = SignalMap::parse("pause=KILL", "HYDRO_SIGNALS", &m);
  EXPECT_EQ(s.message(), "HYDRO_SIGNALS: SIGKILL cannot be caught");
  s = SignalMap::parse("pause=11", "HYDRO_SIGNALS", &m);
  EXPECT_EQ(s.message(),
            "HYDRO_SIGNALS: signal 11 reports a fault in the program (or a broken pipe, or a child's end); "
            "it cannot ask hydro for anything");
  EXPECT_FALSE(SignalMap::parse("resume=BUS", "HYDRO_SIGNALS", &m).ok());
  EXPECT_FALSE(SignalMap::parse("checkpoint=CHLD", "HYDRO_SIGNALS", &m).ok());
}

// What a --hydro-pause=on job's processes start with blocked: the pause, resume and checkpoint
// signals that would kill a process without a handler, or that it would drop (SIGWINCH, the
// checkpoint's: the soak test's early `hydroctl checkpoint` was lost); never SIGTERM, SIGTSTP or
// SIGCONT.
TEST(SignalMap, BlockedUntilHandledAreTheRequestsThatWouldKillOrBeDropped) {
  sigset_t d = SignalMap::defaults().blocked_until_handled();
  for (int s = 1; s < NSIG; ++s) EXPECT_EQ(sigismember(&d, s) == 1, s == SIGUSR1 || s == SIGUSR2 || s == SIGWINCH) << s;
  SignalMap m;
  ASSERT_TRUE(
      SignalMap::parse("pause=HUP,TSTP;resume=CONT,ALRM;checkpoint_exit=TERM,URG;checkpoint=USR1", "x", &m).ok());
  sigset_t b = m.blocked_until_handled();
  for (int s = 1; s < NSIG; ++s) EXPECT_EQ(sigismember(&b, s) == 1, s == SIGHUP || s == SIGALRM || s == SIGUSR1) << s;
}

TEST(SignalMap, SendersUseTheActionsOwnSignalOverSlurms) {
  SignalMap d = SignalMap::defaults();
  EXPECT_EQ(d.signal_for(Action::pause), SIGUSR1);
  EXPECT_EQ(d.signal_for(Action::resume), SIGUSR2);
  EXPECT_EQ(d.signal_for(Action::checkpoint), SIGWINCH);
  EXPECT_EQ(d.signal_for(Action::checkpoint_exit), SIGTERM);
  SignalMap m;
  ASSERT_TRUE(SignalMap::parse("pause=PWR,TSTP;resume=CONT;checkpoint_exit=TERM,URG;checkpoint=", "x", &m).ok());
  EXPECT_EQ(m.signal_for(Action::pause), SIGPWR);
  EXPECT_EQ(m.signal_for(Action::resume), SIGCONT);
  EXPECT_EQ(m.signal_for(Action::checkpoint_exit), SIGURG);
  EXPECT_EQ(m.signal_for(Action::checkpoint), 0);
  EXPECT_EQ(m.signals(), (std::vector<int>{SIGTERM, SIGCONT, SIGTSTP, SIGURG, SIGPWR}));
}

TEST(SignalNames, ParseAndPrint) {
  EXPECT_EQ(parse_signal("USR1"), SIGUSR1);
  EXPECT_EQ(parse_signal("SIGTERM"), SIGTERM);
  EXPECT_EQ(parse_signal("10"), 10);
  EXPECT_EQ(parse_signal("0"), 0);
  EXPECT_EQ(parse_signal("999"), 0);
  EXPECT_EQ(parse_signal("NOPE"), 0);
  EXPECT_EQ(signal_name(SIGTSTP), "SIGTSTP");
}

}  // namespace
}  // namespace hydro
