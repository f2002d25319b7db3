// Bad input to the plugin, each with the exact message a user (at submit time) or an admin (in
// slurmd's log) sees. The runtime's own negative cases (HYDRO_* variables, a dangling `latest`,
// a checkpoint from another model) are in settings_test, checkpoint_dir_test and runtime_test.
#include <gtest/gtest.h>

#include <fstream>

#include "fault_fs.h"
#include "admin_config.h"

namespace hydro::admin {
namespace {

const SettingSpec& spec(const std::string& key) {
  for (const auto& s : job_setting_specs())
    if (key == s.key) return s;
  throw std::runtime_error("no spec " + key);
}

struct OptionCase {
  const char* key;
  const char* value;
  const char* message;
};

// A user's option, as srun/sbatch/salloc report it ("hydro: option: " + message).
const OptionCase kOptionCases[] = {
    {"default_pause", "banana", "--hydro-pause: 'banana' is not on or off"},
    {"default_pause", "", "--hydro-pause: '' is not on or off"},
    {"checkpoint_dir", "ckpt", "--hydro-checkpoint-dir='ckpt' must be an absolute path"},
    {"checkpoint_dir", "", "--hydro-checkpoint-dir='' must be an absolute path"},
    {"checkpoint_dir", "/scratch/../etc", "--hydro-checkpoint-dir='/scratch/../etc' must not contain '..'"},
    {"checkpoint_dir", "/scratch/..", "--hydro-checkpoint-dir='/scratch/..' must not contain '..'"},
    {"checkpoint_dir", "/a\nb", "--hydro-checkpoint-dir='/a\nb' holds a control character"},
    {"checkpoint_every", "often", "--hydro-checkpoint-every='often' is not a whole number"},
    {"checkpoint_every", "-5", "--hydro-checkpoint-every=-5 is out of range [0, 9223372036854775807]"},
    {"checkpoint_every", "1e3", "--hydro-checkpoint-every='1e3' is not a whole number"},
    {"keep_last", "-1", "--hydro-keep-last=-1 is out of range [0, 1000000]"},
    {"keep_last", "2000000", "--hydro-keep-last=2000000 is out of range [0, 1000000]"},
    {"keep_last", "three", "--hydro-keep-last='three' is not a whole number"},
    {"checkpoint_mode", "sometimes", "--hydro-checkpoint-mode='sometimes' is not sync_any, sync_all or async"},
    {"checkpoint_mode", "SYNC_ANY", "--hydro-checkpoint-mode='SYNC_ANY' is not sync_any, sync_all or async"},
    {"max_restarts", "-2", "--hydro-max-restarts=-2 is out of range [0, 1000000]"},
    {"max_restarts", "many", "--hydro-max-restarts='many' is not a whole number"},
    {"gpu_release", "on", "--hydro-gpu-release='on' is not off, cache or full"},
    {"gpu_release", "FULL", "--hydro-gpu-release='FULL' is not off, cache or full"},
};

TEST(ConfigNegative, UserOptions) {
  for (const auto& c : kOptionCases) {
    JobSettings s;
    const auto& sp = spec(c.key);
    Status st = parse_job_setting(sp, c.value, std::string("--") + sp.option, false, &s);
    EXPECT_EQ(st.message(), c.message) << c.key << "=" << c.value;
    EXPECT_EQ(job_setting_value(s, sp), "") << "a refused value must not be kept";
  }
}

struct ArgsCase {
  std::vector<std::string> args;
  const char* message;
};

TEST(ConfigNegative, PlugstackArguments) {
  const ArgsCase cases[] = {
      {{"colour=blue"},
       "plugstack.conf: unknown spank_hydro.so key 'colour' (known: config, default_pause, checkpoint_dir, "
       "checkpoint_every, keep_last, checkpoint_mode, max_restarts, restarts, time_limit_margin, signals, "
       "gpu_release, suspend_grace_time)"},
      {{"signals=pause=11"},
       "plugstack.conf: signals: signal 11 reports a fault in the program (or a broken pipe, or a child's end); it "
       "cannot ask hydro for anything"},
      {{"default_pause"}, "plugstack.conf: spank_hydro.so argument 'default_pause' is not key=value"},
      {{"default_pause=maybe"}, "plugstack.conf: default_pause: 'maybe' is not on or off"},
      {{"checkpoint_dir=scratch/%u/%j"}, "plugstack.conf: checkpoint_dir='scratch/%u/%j' must be an absolute path"},
      {{"checkpoint_dir=/scratch/../etc/%j"},
       "plugstack.conf: checkpoint_dir='/scratch/../etc/%j' must not contain '..'"},
      {{"checkpoint_dir=/scratch/%x/%j"},
       "plugstack.conf: checkpoint_dir: unknown escape '%x' (known: %u, %U, %j, %%)"},
      {{"checkpoint_dir=/scratch/%j%"}, "plugstack.conf: checkpoint_dir: unknown escape '%' (known: %u, %U, %j, %%)"},
      {{"checkpoint_dir=/scratch/hydro/%u"},
       "plugstack.conf: checkpoint_dir='/scratch/hydro/%u' must contain %j, so that each job has its own "
       "directory"},
      // "%%j" is a literal "%j": every job of a user would share one directory.
      {{"checkpoint_dir=/scratch/%u/%%j"},
       "plugstack.conf: checkpoint_dir='/scratch/%u/%%j' must contain %j, so that each job has its own "
       "directory"},
      {{"keep_last=x"}, "plugstack.conf: keep_last='x' is not a whole number"},
      {{"checkpoint_mode=fast"}, "plugstack.conf: checkpoint_mode='fast' is not sync_any, sync_all or async"},
      {{"gpu_release=all"}, "plugstack.conf: gpu_release='all' is not off, cache or full"},
      {{"config=hydro.yaml"}, "plugstack.conf: config='hydro.yaml' must be an absolute path"},
      {{"config=/etc/a.yaml", "config=/etc/b.yaml"}, "plugstack.conf: config= is given twice"},
      {{"config=/nonexistent/hydro.yaml"},
       "/nonexistent/hydro.yaml: cannot read the hydro config: No such file or directory"},
  };
  for (const auto& c : cases) {
    PluginConfig cfg;
    EXPECT_EQ(PluginConfig::parse(c.args, "plugstack.conf", &cfg).message(), c.message) << c.args[0];
  }
}

struct YamlCase {
  const char* text;
  const char* message;  // after "<path>: "
};

TEST(ConfigNegative, YamlFiles) {
  const YamlCase cases[] = {
      {"colour: blue\n",
       "line 1: unknown key 'colour' (known: default_pause, checkpoint_dir, checkpoint_every, keep_last, "
       "checkpoint_mode, max_restarts, restarts, time_limit_margin, signals, gpu_release, suspend_grace_time)"},
      {"signals: pause=NAP\n", "line 1: signals: unknown signal 'NAP'"},
      {"keep_last: 2\nkeep_last: 3\n", "line 2: keep_last is given twice"},
      {"keep_last:\n", "line 1: keep_last has no value"},
      {"keep_last: [1, 2]\n", "line 1: keep_last must be a single value, not a list or mapping"},
      {"checkpoint_dir:\n  path: /x\n", "line 2: checkpoint_dir must be a single value, not a list or mapping"},
      {"default_pause: perhaps\n", "line 1: default_pause: 'perhaps' is not on or off"},
      {"\n\ncheckpoint_every: -1\n", "line 3: checkpoint_every=-1 is out of range [0, 9223372036854775807]"},
      {"checkpoint_dir: relative/%j\n", "line 1: checkpoint_dir='relative/%j' must be an absolute path"},
      {"checkpoint_dir: /s/%u\n",
       "line 1: checkpoint_dir='/s/%u' must contain %j, so that each job has its own directory"},
      {"checkpoint_mode: [sync_any\n", "line 2: not valid YAML: end of sequence flow not found"},
      {"keep_last: 1\n  bad indent: 2\n", "line 2: not valid YAML: illegal map value"},
      {"- keep_last: 1\n", "must be a mapping of hydro settings (key: value)"},
      {"just a string\n", "must be a mapping of hydro settings (key: value)"},
      {"[a, b]: 1\n", "line 1: a key must be a name"},
  };
  test::TempDir t;
  std::string path = t.path + "/hydro.yaml";
  for (const auto& c : cases) {
    std::ofstream(path, std::ios::trunc) << c.text;
    JobSettings s;
    EXPECT_EQ(PluginConfig::load_yaml(path, &s).message(), path + ": " + c.message) << c.text;
  }
}

TEST(ConfigNegative, AnUnreadableYamlFileIsNamed) {
  test::TempDir t;
  JobSettings s;
  EXPECT_EQ(PluginConfig::load_yaml(t.path, &s).message(), t.path + ": cannot read the hydro config: Is a directory");
}

}  // namespace
}  // namespace hydro::admin
