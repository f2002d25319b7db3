#include "requeue.h"

#include <regex>

#include "say.h"
#include "hydro/subprocess.h"

namespace hydro::launcher {

bool requeued_since(const std::string& text, int restart_count) {
  static const std::regex restarts_re(R"((?:^|\s)Restarts=([0-9]+))");
  static const std::regex state_re(R"((?:^|\s)JobState=(PENDING|REQUEUED|REQUEUE_HOLD|REQUEUE_FED)(?:\s|$))");
  std::smatch m;
  if (std::regex_search(text, m, restarts_re) && std::stol(m[1]) > restart_count) return true;
  return std::regex_search(text, state_re);
}

Requeue requeue_job(const std::string& scontrol, const std::string& job_id, int restart_count, int* rc) {
  std::string out;
  *rc = run_capture({scontrol, "requeue", job_id}, &out);
  if (!out.empty()) say(scontrol + " requeue: " + out);
  if (*rc == 0) return Requeue::done;
  std::string show;
  if (run_capture({scontrol, "show", "job", job_id}, &show) == 0 && requeued_since(show, restart_count))
    return Requeue::done_already;
  return Requeue::failed;
}

}  // namespace hydro::launcher
