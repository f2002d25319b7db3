#include <gtest/gtest.h>

#include "plugin_config.h"

namespace hydro::spank {
namespace {

TEST(PluginConfig, DefaultsAndKeys) {
  PluginConfig c;
  ASSERT_TRUE(PluginConfig::parse({}, "plugstack.conf", &c).ok());
  EXPECT_FALSE(c.default_pause);
  EXPECT_EQ(c.checkpoint_dir, "");
  ASSERT_TRUE(PluginConfig::parse({"default_pause=on", "checkpoint_dir=/scratch/%u/%j"}, "plugstack.conf", &c).ok());
  EXPECT_TRUE(c.default_pause);
  EXPECT_EQ(c.checkpoint_dir, "/scratch/%u/%j");
}

TEST(PluginConfig, ErrorsNameTheKeyAndFile) {
  PluginConfig c;
  EXPECT_EQ(PluginConfig::parse({"colour=blue"}, "plugstack.conf", &c).message(),
            "plugstack.conf: unknown spank_hydro.so key 'colour' (known: default_pause, checkpoint_dir)");
  EXPECT_EQ(PluginConfig::parse({"default_pause"}, "plugstack.conf", &c).message(),
            "plugstack.conf: spank_hydro.so argument 'default_pause' is not key=value");
  EXPECT_EQ(PluginConfig::parse({"default_pause=maybe"}, "plugstack.conf", &c).message(),
            "plugstack.conf: default_pause: 'maybe' is not on or off");
  EXPECT_EQ(PluginConfig::parse({"checkpoint_dir=scratch/%u"}, "plugstack.conf", &c).message(),
            "plugstack.conf: checkpoint_dir='scratch/%u' must be an absolute path");
  EXPECT_EQ(PluginConfig::parse({"checkpoint_dir=/scratch/../etc"}, "plugstack.conf", &c).message(),
            "plugstack.conf: checkpoint_dir='/scratch/../etc' must not contain '..'");
  EXPECT_EQ(PluginConfig::parse({"checkpoint_dir=/scratch/%x"}, "plugstack.conf", &c).message(),
            "checkpoint_dir: unknown escape '%x' (known: %u, %U, %j, %%)");
}

TEST(PluginConfig, TemplateExpansion) {
  std::string out;
  ASSERT_TRUE(expand_template("/s/%u/%U/%j/100%%", "alice", 1001, 42, &out).ok());
  EXPECT_EQ(out, "/s/alice/1001/42/100%");
}

}  // namespace
}  // namespace hydro::spank
