#include <gtest/gtest.h>

#include <fstream>

#include "admin_config.h"
#include "hydro/setting_schema.h"
#include "fault_fs.h"

namespace hydro::admin {
namespace {

TEST(PluginConfig, DefaultsAndKeys) {
  PluginConfig c;
  ASSERT_TRUE(PluginConfig::parse({}, "plugstack.conf", &c).ok());
  EXPECT_FALSE(c.defaults.has("default_pause"));
  EXPECT_FALSE(c.defaults.has("checkpoint_dir"));
  ASSERT_TRUE(
      PluginConfig::parse({"default_pause=on", "checkpoint_dir=/scratch/%u/%j", "checkpoint_every=100", "keep_last=2",
                           "checkpoint_mode=sync_all", "max_restarts=7", "time_limit_margin=300"},
                          "plugstack.conf", &c)
          .ok());
  EXPECT_EQ(c.defaults.get("default_pause"), "on");
  EXPECT_EQ(c.defaults.get("checkpoint_dir"), "/scratch/%u/%j");
  EXPECT_EQ(c.defaults.get("checkpoint_every"), "100");
  EXPECT_EQ(c.defaults.get("keep_last"), "2");
  EXPECT_EQ(c.defaults.get("checkpoint_mode"), "sync_all");
  EXPECT_EQ(c.defaults.get("max_restarts"), "7");
  EXPECT_EQ(c.defaults.get("time_limit_margin"), "300");
  EXPECT_FALSE(PluginConfig::parse({"time_limit_margin=-1"}, "plugstack.conf", &c).ok());
}

TEST(PluginConfig, YamlFileWithPlugstackArgumentsOverridingIt) {
  test::TempDir d;
  std::string yaml = d.path + "/hydro.yaml";
  std::ofstream(yaml) << "# comment\ndefault_pause: on\ncheckpoint_dir: /scratch/hydro/%u/%j\nkeep_last: 5\n"
                         "checkpoint_every: 200\nsignals: \"pause=TSTP,PWR;resume=CONT,URG\"\n";
  PluginConfig c;
  ASSERT_TRUE(PluginConfig::parse({"keep_last=9", "config=" + yaml}, "plugstack.conf", &c).ok());
  EXPECT_EQ(c.config_file, yaml);
  EXPECT_EQ(c.defaults.get("default_pause"), "on");
  EXPECT_EQ(c.defaults.get("checkpoint_dir"), "/scratch/hydro/%u/%j");
  EXPECT_EQ(c.defaults.get("keep_last"), "9");  // the plugstack argument wins
  EXPECT_EQ(c.defaults.get("checkpoint_every"), "200");
  EXPECT_FALSE(c.defaults.has("checkpoint_mode"));
  EXPECT_EQ(c.defaults.get("signals"), "pause=TSTP,PWR;resume=CONT,URG");  // what the job's HYDRO_SIGNALS gets
}

TEST(PluginConfig, TheShippedExampleConfigIsValid) {
  JobSettings s;
  Status st = PluginConfig::load_yaml(HYDRO_SOURCE_DIR "/etc/hydro.yaml", &s);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(s.get("keep_last"), "3");
  // Installed by the package on nodes with no /scratch yet: a checkpoint_dir whose base is missing
  // would fail every job, so it ships commented out.
  EXPECT_FALSE(s.has("checkpoint_dir"));
}

TEST(PluginConfig, AnEmptyYamlFileSetsNothing) {
  test::TempDir d;
  std::ofstream(d.path + "/e.yaml") << "# nothing yet\n";
  JobSettings s;
  ASSERT_TRUE(PluginConfig::load_yaml(d.path + "/e.yaml", &s).ok());
  EXPECT_FALSE(s.has("default_pause"));
}

TEST(PluginConfig, UserOptionsTakeLiteralDirectories) {
  JobSettings s;
  const auto& dir = job_setting_specs()[1];
  ASSERT_EQ(std::string(dir.key), "checkpoint_dir");
  ASSERT_TRUE(parse_job_setting(dir, "/home/a/ckpt%x", "--hydro-checkpoint-dir", false, &s).ok());
  EXPECT_EQ(job_setting_value(s, dir), "/home/a/ckpt%x");
}

// Every schema row an admin sets goes through the plugin's parser and back to the job's variable
// with no code of its own: a new setting is a schema row.
TEST(PluginConfig, EverySchemaRowWithAnAdminKeyRoundTripsWithNoCodeOfItsOwn) {
  for (const auto& spec : job_setting_specs()) {
    const SettingRow& row = setting_row(spec.env);
    if (row.kind == SettingKind::absolute_path || !*row.fallback) continue;
    JobSettings s;
    Status st = parse_job_setting(spec, row.fallback, spec.key, false, &s);
    ASSERT_TRUE(st.ok()) << spec.key << ": " << st.message();
    EXPECT_EQ(job_setting_value(s, spec), row.fallback) << spec.key;
  }
}

TEST(PluginConfig, TemplateExpansion) {
  std::string out;
  ASSERT_TRUE(expand_template("/s/%u/%U/%j/100%%", "alice", 1001, 42, &out).ok());
  EXPECT_EQ(out, "/s/alice/1001/42/100%");
}

}  // namespace
}  // namespace hydro::admin
