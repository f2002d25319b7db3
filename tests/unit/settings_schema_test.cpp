// The one settings schema (hydro/setting_schema.h): its checks, and the admin's guide's and the
// shipped config's tables held to it, so that a setting added to the schema cannot go undocumented.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "hydro/setting_schema.h"

namespace hydro {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Every part names a variable as env_name(Setting::x): each Setting is the row of its own name.
TEST(SettingsSchema, EachSettingIsTheRowOfItsVariable) {
  const std::vector<std::pair<Setting, std::string>> names = {
      {Setting::pause, "HYDRO_PAUSE"},
      {Setting::checkpoint_dir, "HYDRO_CKPT_DIR"},
      {Setting::checkpoint_every, "HYDRO_CKPT_EVERY"},
      {Setting::keep_last, "HYDRO_KEEP_LAST"},
      {Setting::checkpoint_mode, "HYDRO_CKPT_MODE"},
      {Setting::max_restarts, "HYDRO_MAX_RESTARTS"},
      {Setting::restarts, "HYDRO_RESTARTS"},
      {Setting::time_limit_margin, "HYDRO_TIME_LIMIT_MARGIN"},
      {Setting::signals, "HYDRO_SIGNALS"},
      {Setting::gpu_release, "HYDRO_GPU_RELEASE"},
      {Setting::suspend_grace, "HYDRO_SUSPEND_GRACE"},
      {Setting::direct_io, "HYDRO_CKPT_DIRECT_IO"},
      {Setting::suspend_checkpoint, "HYDRO_SUSPEND_CHECKPOINT"},
      {Setting::store_timeout, "HYDRO_STORE_TIMEOUT"},
      {Setting::checkpoint_failure_grace, "HYDRO_CKPT_FAILURE_GRACE"},
      {Setting::resume_from, "HYDRO_RESUME_FROM"},
      {Setting::async_copy, "HYDRO_ASYNC_COPY"},
      {Setting::gpu_allocator, "HYDRO_GPU_ALLOCATOR"},
  };
  ASSERT_EQ(names.size(), settings_schema().size()) << "a row without a Setting, or a Setting without a row";
  for (const auto& [setting, name] : names) {
    EXPECT_EQ(env_name(setting), name);
    EXPECT_EQ(&setting_row(setting), &setting_row(name));
  }
}

TEST(SettingsSchema, ChecksEachKindAndNamesTheSource) {
  EXPECT_TRUE(check_setting(setting_row("HYDRO_KEEP_LAST"), "5", "HYDRO_KEEP_LAST").ok());
  EXPECT_EQ(check_setting(setting_row("HYDRO_KEEP_LAST"), "-1", "--hydro-keep-last").message(),
            "--hydro-keep-last=-1 is out of range [0, 1000000]");
  EXPECT_EQ(check_setting(setting_row("HYDRO_PAUSE"), "maybe", "HYDRO_PAUSE").message(),
            "HYDRO_PAUSE: 'maybe' is not on or off");
  EXPECT_EQ(check_setting(setting_row("HYDRO_CKPT_MODE"), "fast", "HYDRO_CKPT_MODE").message(),
            "HYDRO_CKPT_MODE='fast' is not sync_any, sync_all or async");
  EXPECT_EQ(check_setting(setting_row("HYDRO_SUSPEND_CHECKPOINT"), "on", "x").message(), "x='on' is not auto or off");
  EXPECT_EQ(check_setting(setting_row("HYDRO_RESUME_FROM"), "ck", "HYDRO_RESUME_FROM").message(),
            "HYDRO_RESUME_FROM='ck' must be an absolute path");
  EXPECT_EQ(check_setting(setting_row("HYDRO_SIGNALS"), "pause=NAP", "HYDRO_SIGNALS").message(),
            "HYDRO_SIGNALS: unknown signal 'NAP'");
  EXPECT_THROW(setting_row("HYDRO_NO_SUCH"), std::logic_error);
}

// docs/admins-guide.md, "Settings": | `key: ...` | `--option=...` | `VARIABLE` |, one row per admin
// setting.
// Found by fuzz.setting_values: strtoll stopped at a NUL inside the value (the admin's YAML can
// hold one, as "\0"), and "5\0junk" was taken for 5, "\0" for 0.
TEST(SettingsSchema, ANumberWithANulInsideIsRefused) {
  for (const std::string v : {std::string("5\0junk", 6), std::string("\0", 1)})
    EXPECT_FALSE(check_setting(setting_row("HYDRO_KEEP_LAST"), v, "keep_last").ok()) << v.size();
}

TEST(SettingsSchema, TheAdminsGuideTableIsTheSchemas) {
  const std::string guide = slurp(HYDRO_SOURCE_DIR "/docs/admins-guide.md");
  std::set<std::string> documented, schema;
  // A setting with no user option (the admin's alone) has "none ..." in the option's column.
  std::regex row(R"(\n\| `([a-z_]+): [^`]*` \| (?:`--([a-z-]+)[^`]*`|none[^|]*) \| `(HYDRO_[A-Z_]+)` \|)");
  for (std::sregex_iterator it(guide.begin(), guide.end(), row), end; it != end; ++it)
    documented.insert((*it)[1].str() + " --" + (*it)[2].str() + " " + (*it)[3].str());
  for (const auto& r : settings_schema())
    if (r.key) schema.insert(std::string(r.key) + " --" + (r.option ? r.option : "") + " " + r.env);
  EXPECT_EQ(documented, schema);
}

// Every variable, with an admin key or not, is named in docs/admins-guide.md, "Settings".
TEST(SettingsSchema, EverySettingIsDocumented) {
  const std::string guide = slurp(HYDRO_SOURCE_DIR "/docs/admins-guide.md");
  const std::string yaml = slurp(HYDRO_SOURCE_DIR "/etc/hydro.yaml");
  for (const auto& r : settings_schema()) {
    EXPECT_NE(guide.find(std::string("`") + r.env + "`"), std::string::npos)
        << r.env << " is not in docs/admins-guide.md";
    if (!r.key) continue;
    EXPECT_NE(yaml.find(std::string(r.key) + ":"), std::string::npos) << r.key << " is not in etc/hydro.yaml";
    if (r.option)
      EXPECT_NE(yaml.find(std::string("--") + r.option), std::string::npos) << r.option << " is not in etc/hydro.yaml";
  }
}

}  // namespace
}  // namespace hydro
