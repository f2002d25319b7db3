#include "suspend_grace.h"

#include <glob.h>
#include <strings.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace hydro::spank {
namespace {

constexpr const char* kKey = "suspend_grace_time=";
constexpr int kMaxIncludeDepth = 4;

bool same_key(const std::string& a, const char* b) { return strcasecmp(a.c_str(), b) == 0; }

// One line's words: split at blanks outside double quotes, the quotes dropped; '#' ends the line.
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::string word;
  bool quoted = false, any = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
      any = true;
    } else if (!quoted && c == '#') {
      break;
    } else if (!quoted && std::isspace(static_cast<unsigned char>(c))) {
      if (any) out.push_back(word);
      word.clear();
      any = false;
    } else {
      word += c;
      any = true;
    }
  }
  if (any) out.push_back(word);
  return out;
}

// `path`'s text with each "Include PATTERN" line replaced by the files it names (relative to
// `path`'s directory, as Slurm reads them). False if `path` cannot be read.
bool read_conf(const std::string& path, int depth, std::string* text) {
  std::ifstream in(path);
  if (!in) return false;
  const std::string dir = path.substr(0, path.rfind('/') + 1);
  std::string line;
  while (std::getline(in, line)) {
    const std::vector<std::string> w = words(line);
    if (w.size() == 2 && same_key(w[0], "include") && depth < kMaxIncludeDepth) {
      const std::string pattern = w[1][0] == '/' ? w[1] : dir + w[1];
      glob_t g{};
      if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i) read_conf(g.gl_pathv[i], depth + 1, text);
      globfree(&g);
      continue;
    }
    *text += line + "\n";
  }
  return true;
}

std::string seconds_text(int64_t s) { return std::to_string(s) + " s"; }

}  // namespace

std::optional<std::string> preempt_parameters(const std::string& conf_text) {
  std::optional<std::string> found;
  std::istringstream in(conf_text);
  std::string line;
  while (std::getline(in, line))
    for (const std::string& w : words(line)) {
      const size_t eq = w.find('=');
      if (eq != std::string::npos && same_key(w.substr(0, eq), "PreemptParameters")) found = w.substr(eq + 1);
    }
  return found;
}

std::optional<int64_t> grace_from_preempt_parameters(const std::string& params, std::string* why) {
  const char* at = strcasestr(params.c_str(), kKey);
  if (!at) return std::nullopt;
  const char* value = at + std::strlen(kKey);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value, &end, 10);
  // slurmstepd's parse_uint32: the whole rest, a number below NO_VAL (0xfffffffe).
  if (end == value || *end != '\0' || errno != 0 || v < 0 || v >= 0xfffffffeLL) {
    if (why)
      *why = std::string("Slurm cannot parse '") + at + "' (suspend_grace_time must be the last of PreemptParameters" +
             ", a whole number) and keeps its default";
    return kSlurmDefaultSuspendGrace;
  }
  return v;
}

SuspendGrace suspend_grace(int slurm_major, int slurm_minor, const std::string& conf_path,
                           std::optional<int64_t> admin) {
  if (slurm_major < 23 || (slurm_major == 23 && slurm_minor < 11))
    return {kSlurmDefaultSuspendGrace, "Slurm " + std::to_string(slurm_major) + (slurm_minor < 10 ? ".0" : ".") +
                                           std::to_string(slurm_minor) + "'s fixed " +
                                           seconds_text(kSlurmDefaultSuspendGrace)};
  std::string text;
  if (conf_path.empty() || !read_conf(conf_path, 0, &text)) {
    const std::string cause = conf_path.empty() ? "no SLURM_CONF in slurmstepd's environment"
                                                : "cannot read " + conf_path + ": " + std::strerror(errno);
    if (admin) return {*admin, "the hydro config's suspend_grace_time (" + cause + ")"};
    return {kSlurmDefaultSuspendGrace,
            "Slurm's default (" + cause + ", and the hydro config sets no suspend_grace_time)"};
  }
  std::string why;
  const std::optional<int64_t> s = grace_from_preempt_parameters(preempt_parameters(text).value_or(""), &why);
  if (!s)
    return {kSlurmDefaultSuspendGrace,
            "Slurm's default (" + conf_path + " sets no PreemptParameters=suspend_grace_time)"};
  if (!why.empty()) return {*s, "Slurm's default: " + why + " (" + conf_path + ")"};
  return {*s, "slurm.conf's PreemptParameters (" + conf_path + ")"};
}

}  // namespace hydro::spank
