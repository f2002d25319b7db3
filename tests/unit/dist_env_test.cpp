#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "hydro/dist_env.h"

namespace hydro {
namespace {

Status parse(std::map<std::string, std::string> env, DistEnv* out) {
  return DistEnv::from_env(out, [&env](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(DistEnv, OneRankWithAnEmptyEnvironment) {
  DistEnv d;
  ASSERT_TRUE(parse({}, &d).ok());
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_EQ(d.master_addr, "127.0.0.1");
  EXPECT_EQ(d.master_port, 29500);
}

TEST(DistEnv, SlurmStepOnOneNode) {
  DistEnv d;
  ASSERT_TRUE(parse({{"SLURM_PROCID", "1"},
                     {"SLURM_STEP_NUM_TASKS", "2"},
                     {"SLURM_NTASKS", "2"},
                     {"SLURM_LOCALID", "1"},
                     {"SLURM_STEP_NUM_NODES", "1"},
                     {"SLURM_JOB_ID", "4262"}},
                    &d)
                  .ok());
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.world_size, 2);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.master_addr, "127.0.0.1");
  EXPECT_EQ(d.master_port, 20021);  // 20000 + 3 * (4262 % 4255)
  EXPECT_EQ(d.store_port(), 20022);
  EXPECT_EQ(d.restart_group_port(), 20023);
}

TEST(DistEnv, ABatchScriptIsOneRankEvenUnderSbatchWithTwoTasks) {
  DistEnv d;
  ASSERT_TRUE(parse({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "5"}}, &d).ok());
  EXPECT_EQ(d.world_size, 1);
}

TEST(DistEnv, TorchrunVariablesWinOverSlurms) {
  DistEnv d;
  ASSERT_TRUE(parse({{"RANK", "3"},
                     {"WORLD_SIZE", "4"},
                     {"LOCAL_RANK", "0"},
                     {"MASTER_ADDR", "node7"},
                     {"MASTER_PORT", "1234"},
                     {"SLURM_PROCID", "0"},
                     {"SLURM_STEP_NUM_TASKS", "1"}},
                    &d)
                  .ok());
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.world_size, 4);
  EXPECT_EQ(d.master_addr, "node7");
  EXPECT_EQ(d.master_port, 1234);
}

TEST(DistEnv, RanksOnSeveralNodesMeetAtTheFirstHostOfTheStep) {
  DistEnv d;
  ASSERT_TRUE(parse({{"SLURM_PROCID", "3"},
                     {"SLURM_STEP_NUM_TASKS", "4"},
                     {"SLURM_STEP_NUM_NODES", "2"},
                     {"SLURM_STEP_NODELIST", "node[1-2]"},
                     {"SLURM_JOB_ID", "7"}},
                    &d)
                  .ok());
  EXPECT_EQ(d.master_addr, "node1");
  EXPECT_EQ(d.master_port, 20021);
}

// Two jobs on one node must not share a port: an array's tasks have consecutive ids.
TEST(DistEnv, JobsWhoseIdsAreCloseTakeDisjointPortsBelowTheEphemeralRange) {
  auto port_of_job = [](int id) {
    DistEnv d;
    EXPECT_TRUE(parse({{"SLURM_JOB_ID", std::to_string(id)}}, &d).ok());
    return d.master_port;
  };
  for (int id = 0; id < 20000; id += 7) {
    const int p = port_of_job(id);
    EXPECT_GE(p, 20000);
    EXPECT_LT(p + DistEnv::kPortsPerJob - 1, 32768) << "job " << id;
    for (int other = id + 1; other < id + DistEnv::kDefaultPortSlots; other += 97)
      EXPECT_GE(std::abs(port_of_job(other) - p), DistEnv::kPortsPerJob) << "jobs " << id << " and " << other;
  }
}

TEST(DistEnv, TheFirstHostOfASlurmHostList) {
  EXPECT_EQ(first_host("node1"), "node1");
  EXPECT_EQ(first_host("node[1-2]"), "node1");
  EXPECT_EQ(first_host("node[03-04,7],gpu1"), "node03");
  EXPECT_EQ(first_host("gpu[7,9]"), "gpu7");
  EXPECT_EQ(first_host("a1,b[2-3]"), "a1");
  EXPECT_EQ(first_host("rack[2-3]-n[10-11]"), "rack2-n10");
}

TEST(DistEnv, BadValuesNameTheVariable) {
  DistEnv d;
  EXPECT_EQ(parse({{"SLURM_STEP_NUM_TASKS", "two"}}, &d).message(), "SLURM_STEP_NUM_TASKS='two' is not a whole number");
  EXPECT_EQ(parse({{"SLURM_STEP_NUM_TASKS", "0"}}, &d).message(),
            "SLURM_STEP_NUM_TASKS=0 is out of range [1, 1048576]");
  EXPECT_EQ(parse({{"RANK", "2"}, {"WORLD_SIZE", "2"}}, &d).message(), "RANK=2 is not below WORLD_SIZE=2");
  EXPECT_EQ(parse({{"MASTER_PORT", "70000"}}, &d).message(), "MASTER_PORT=70000 is out of range [1, 65533]");
  // hydro takes MASTER_PORT + 1 and + 2: 65534 would wrap the restart group's to port 0.
  EXPECT_EQ(parse({{"MASTER_PORT", "65534"}}, &d).message(), "MASTER_PORT=65534 is out of range [1, 65533]");
  EXPECT_EQ(parse({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_STEP_NUM_NODES", "2"}}, &d).message(),
            "MASTER_ADDR is not set: ranks on several nodes need the rendezvous host (for example the first of "
            "`scontrol show hostnames $SLURM_JOB_NODELIST`)");
  EXPECT_EQ(parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}}, &d).message(),
            "MASTER_ADDR is not set: with 2 ranks outside a one-node Slurm step, name the host of rank 0");
}

}  // namespace
}  // namespace hydro
