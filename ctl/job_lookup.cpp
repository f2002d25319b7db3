#include "job_lookup.h"

#include <regex>

#include "hydro/subprocess.h"

namespace hydro::ctl {

Status parse_job_owner(const std::string& text, const std::string& job, JobOwner* out) {
  static const std::regex re(R"(UserId=([^(\s]+)\((\d+)\))");
  std::smatch m;
  if (!std::regex_search(text, m, re))
    return Status::not_found("job " + job + ": Slurm does not know it (scontrol show job " + job + ")");
  out->user = m[1];
  out->uid = static_cast<uid_t>(std::stoul(m[2]));
  return Status::OK();
}

Status job_owner(const std::string& scontrol, const std::string& job, JobOwner* out) {
  std::string text;
  int rc = run_capture({scontrol, "show", "job", job}, &text);
  if (rc != 0) return Status::not_found("job " + job + ": scontrol show job failed (status " + std::to_string(rc) + ")");
  return parse_job_owner(text, job, out);
}

}  // namespace hydro::ctl
