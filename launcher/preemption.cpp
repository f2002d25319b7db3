#include "preemption.h"

#include <regex>

#include "hydro/subprocess.h"

namespace hydro::launcher {

std::string preempt_time(const std::string& text) {
  static const std::regex re(R"((?:^|\s)PreemptTime=(\S+))");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return "";
  std::string v = m[1];
  return v == "None" || v == "Unknown" || v == "(null)" ? "" : v;
}

std::string job_preempt_time(const std::string& scontrol, const std::string& job_id) {
  std::string out;
  if (run_capture({scontrol, "show", "job", job_id}, &out) != 0) return "";
  return preempt_time(out);
}

}  // namespace hydro::launcher
