#include "hydro/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "hydro/log.h"
#include "hydro/settings.h"
#include "metrics_json.h"

namespace hydro {
namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string duration(double s) {
  const long long t = std::llround(s);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

}  // namespace

Status ProgressOptions::from_env(ProgressOptions* out, const std::function<const char*(const char*)>& getenv) {
  ProgressOptions o;
  if (const char* v = getenv("HYDRO_PROGRESS_EVERY"))
    HYDRO_RETURN_IF_ERROR(parse_int("HYDRO_PROGRESS_EVERY", v, 0, 86400, &o.every_s));
  if (const char* v = getenv("HYDRO_METRICS_FILE")) o.metrics_file = v;
  *out = o;
  return Status::OK();
}

Status ProgressOptions::from_env(ProgressOptions* out) {
  return from_env(out, [](const char* var) { return std::getenv(var); });
}

ProgressReporter::ProgressReporter(ProgressOptions options, Clock now)
    : options_(std::move(options)), now_(now ? std::move(now) : Clock(steady_ns)) {}

ProgressReporter::~ProgressReporter() {
  if (fd_ >= 0) ::close(fd_);
}

Status ProgressReporter::open() {
  if (options_.metrics_file.empty() || fd_ >= 0) return Status::OK();
  fd_ = ::open(options_.metrics_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::from_errno(errno, "HYDRO_METRICS_FILE: opening " + options_.metrics_file);
  return Status::OK();
}

void ProgressReporter::start(int64_t step, int64_t total_steps) {
  total_ = total_steps;
  last_step_ = step;
  last_ns_ = now_();
}

std::string ProgressReporter::progress_text(int64_t step, int64_t total_steps, int64_t epoch, double steps_per_s,
                                            const MetricsTracker& metrics) {
  std::string s = "step " + std::to_string(step);
  if (total_steps > 0) s += "/" + std::to_string(total_steps);
  s += " epoch " + std::to_string(epoch);
  if (steps_per_s >= 0) {
    s += ": " + num(steps_per_s) + " steps/s";
    if (total_steps > 0 && steps_per_s > 0)
      s += ", ETA " + duration(static_cast<double>(total_steps - step) / steps_per_s);
  }
  for (const auto& [name, st] : metrics.epoch_summary()) s += ", " + name + " " + num(st.mean());
  return s;
}

std::string ProgressReporter::epoch_text(const EpochMetrics& e) {
  std::string s = "epoch " + std::to_string(e.epoch) + " done at step " + std::to_string(e.step);
  const char* sep = ": ";
  for (const auto& [name, st] : e.metrics) {
    s += sep + name + " " + num(st.mean()) + " (min " + num(st.min) + ", max " + num(st.max) + ", n " +
         std::to_string(st.count) + ")";
    sep = ", ";
  }
  return s;
}

void ProgressReporter::step(int64_t step, int64_t epoch, const MetricsTracker& metrics) {
  if (options_.every_s <= 0) return;
  const int64_t now = now_();
  if (now - last_ns_ < options_.every_s * 1000000000) return;
  const double rate = static_cast<double>(step - last_step_) / (static_cast<double>(now - last_ns_) / 1e9);
  last_step_ = step;
  last_ns_ = now;
  log(progress_text(step, total_, epoch, rate, metrics));
  if (fd_ < 0) return;
  nlohmann::json j = {
      {"event", "progress"}, {"time", unix_time()}, {"step", step}, {"epoch", epoch}, {"steps_per_s", rate}};
  if (total_ > 0) {
    j["total_steps"] = total_;
    j["eta_s"] = rate > 0 ? nlohmann::json(static_cast<double>(total_ - step) / rate) : nlohmann::json();
  }
  nlohmann::json means = nlohmann::json::object();
  for (const auto& [name, st] : metrics.epoch_summary()) means[name] = st.mean();
  j["metrics"] = means;
  append(j.dump());
}

void ProgressReporter::epoch_end(const EpochMetrics& e) {
  log(epoch_text(e));
  if (fd_ < 0) return;
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& [name, st] : e.metrics)
    metrics[name] = {{"mean", st.mean()}, {"min", st.min}, {"max", st.max}, {"count", st.count}};
  append(nlohmann::json{
      {"event", "epoch_end"}, {"time", unix_time()}, {"step", e.step}, {"epoch", e.epoch}, {"metrics", metrics}}
             .dump());
}

// One write(2) per line, so lines from several processes never interleave. A failure is logged
// and ends the file's lines: training goes on.
void ProgressReporter::append(const std::string& json_line) {
  const std::string line = json_line + "\n";
  ssize_t w = ::write(fd_, line.data(), line.size());
  if (w == static_cast<ssize_t>(line.size())) return;
  Status st = w < 0 ? Status::from_errno(errno, "HYDRO_METRICS_FILE: writing " + options_.metrics_file)
                    : Status::io("HYDRO_METRICS_FILE: short write to " + options_.metrics_file);
  log("warning: " + st.message() + "; no more metrics lines are written");
  ::close(fd_);
  fd_ = -1;
}

}  // namespace hydro
