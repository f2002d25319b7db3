// Slurm's suspend grace time as the plugin reads it from slurm.conf (spank/suspend_grace.h): as
// slurmstepd parses PreemptParameters (src/slurmd/slurmstepd/req.c, _handle_suspend), Slurm's
// default where nothing or nothing Slurm takes is set, the admin's where the file cannot be read.
#include <gtest/gtest.h>

#include <fstream>

#include "fault_fs.h"
#include "suspend_grace.h"

namespace hydro::spank {
namespace {

std::string write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

TEST(SuspendGrace, PreemptParametersIsFoundAmongOtherKeysOnALineAndTheLastOneWins) {
  EXPECT_EQ(
      preempt_parameters("ClusterName=c\nPreemptType=preempt/partition_prio PreemptParameters=suspend_grace_time=6\n"),
      "suspend_grace_time=6");
  EXPECT_EQ(preempt_parameters("preemptparameters=a\nPreemptParameters=\"b\"  # c\n"), "b");
  EXPECT_EQ(preempt_parameters("#PreemptParameters=suspend_grace_time=6\n"), std::nullopt);
  EXPECT_EQ(preempt_parameters("PreemptMode=SUSPEND,GANG\n"), std::nullopt);
}

TEST(SuspendGrace, ParsedAsSlurmstepdDoesTheRestOfTheValueAWholeNumber) {
  std::string why;
  EXPECT_EQ(grace_from_preempt_parameters("suspend_grace_time=6", &why), 6);
  EXPECT_EQ(grace_from_preempt_parameters("reclaim_licenses,SUSPEND_GRACE_TIME=0", &why), 0);
  EXPECT_EQ(why, "");
  EXPECT_EQ(grace_from_preempt_parameters("strict_order", &why), std::nullopt);
  EXPECT_EQ(why, "");
  // Slurm's parse_uint32 takes the whole rest: an option after it leaves Slurm's 2, and so here.
  EXPECT_EQ(grace_from_preempt_parameters("suspend_grace_time=6,reclaim_licenses", &why), 2);
  EXPECT_NE(why.find("must be the last of PreemptParameters"), std::string::npos) << why;
  why.clear();
  EXPECT_EQ(grace_from_preempt_parameters("suspend_grace_time=-1", &why), 2);
  EXPECT_NE(why, "");
}

TEST(SuspendGrace, BeforeSlurm23_11ItIsTwoWhateverTheFileSays) {
  test::TempDir t;
  const std::string conf = write(t.path + "/slurm.conf", "PreemptParameters=suspend_grace_time=6\n");
  SuspendGrace g = suspend_grace(22, 5, conf, 9);
  EXPECT_EQ(g.seconds, 2);
  EXPECT_EQ(g.from, "Slurm 22.05's fixed 2 s");
  EXPECT_EQ(suspend_grace(23, 2, conf, std::nullopt).seconds, 2);
  EXPECT_EQ(suspend_grace(23, 11, conf, std::nullopt).seconds, 6);
}

TEST(SuspendGrace, FromSlurmConfAndItsIncludesOverTheAdminsSetting) {
  test::TempDir t;
  write(t.path + "/preempt.conf", "PreemptParameters=suspend_grace_time=6\n");
  const std::string conf = write(t.path + "/slurm.conf", "ClusterName=c\nInclude preempt.conf\n");
  SuspendGrace g = suspend_grace(24, 11, conf, 9);
  EXPECT_EQ(g.seconds, 6);
  EXPECT_EQ(g.from, "slurm.conf's PreemptParameters (" + conf + ")");
  write(conf, "ClusterName=c\n");
  g = suspend_grace(24, 11, conf, 9);
  EXPECT_EQ(g.seconds, 2);
  EXPECT_NE(g.from.find("sets no PreemptParameters=suspend_grace_time"), std::string::npos) << g.from;
}

TEST(SuspendGrace, TheAdminsSettingStandsInWhereSlurmConfCannotBeRead) {
  test::TempDir t;
  SuspendGrace g = suspend_grace(25, 11, t.path + "/none.conf", 9);
  EXPECT_EQ(g.seconds, 9);
  EXPECT_NE(g.from.find("the hydro config's suspend_grace_time (cannot read " + t.path + "/none.conf"),
            std::string::npos)
      << g.from;
  g = suspend_grace(25, 11, "", std::nullopt);
  EXPECT_EQ(g.seconds, 2);
  EXPECT_NE(g.from.find("no SLURM_CONF"), std::string::npos) << g.from;
}

}  // namespace
}  // namespace hydro::spank
