#include "job_lookup.h"

#include <regex>
#include <sstream>

#include "hydro/subprocess.h"

namespace hydro::ctl {

// The owner is the field that opens a line ("   UserId=alice(1000) GroupId=..."), never text the
// user chose: a job named "UserId=root(0)" (on the JobName line) must not pass for root's.
Status parse_job_owner(const std::string& text, const std::string& job, JobOwner* out) {
  static const std::regex re(R"(^[ \t]*UserId=([^(\s]+)\((\d+)\))");
  std::istringstream lines(text);
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (!std::regex_search(line, m, re)) continue;
    out->user = m[1];
    out->uid = static_cast<uid_t>(std::stoul(m[2]));
    return Status::OK();
  }
  return Status::not_found("job " + job + ": Slurm does not know it (scontrol show job " + job + ")");
}

Status job_owner(const std::string& scontrol, const std::string& job, JobOwner* out) {
  std::string text;
  int rc = run_capture({scontrol, "show", "job", job}, &text);
  if (rc != 0)
    return Status::not_found("job " + job + ": scontrol show job failed (status " + std::to_string(rc) + ")");
  return parse_job_owner(text, job, out);
}

}  // namespace hydro::ctl
