#include "hydro/timer_table.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <csignal>
#include <nlohmann/json.hpp>

namespace hydro {
namespace {

using nlohmann::json;

Status bad(const std::string& why, const std::string& line) {
  return Status::invalid_argument("watchdog request: " + why + ": " + line);
}

}  // namespace

Status parse_timer_request(const std::string& line, TimerRequest* out) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::invalid_argument("watchdog request is not a JSON object: " + line);
  for (const char* field : {"version", "pid", "scope_id", "expiration_time", "signal"})
    if (!j.contains(field)) return bad(std::string("missing field '") + field + "'", line);

  const json& version = j["version"];
  if (!version.is_number_integer() || version.get<long long>() != kTimerProtocolVersion)
    return bad("unknown version " + version.dump() + " (hydro-launch speaks version " +
                   std::to_string(kTimerProtocolVersion) + ")",
               line);
  const json& pid = j["pid"];
  if (!pid.is_number_integer() || pid.get<long long>() <= 0 || pid.get<long long>() > INT_MAX)
    return bad("'pid' must be a positive integer, not " + pid.dump(), line);
  const json& scope = j["scope_id"];
  if (!scope.is_string()) return bad("'scope_id' must be a string, not " + scope.dump(), line);
  const json& expiration = j["expiration_time"];
  if (!expiration.is_number() || !std::isfinite(expiration.get<double>()))
    return bad("'expiration_time' must be a number (epoch seconds, negative to release), not " + expiration.dump(),
               line);
  const json& sig = j["signal"];
  if (!sig.is_number_integer()) return bad("'signal' must be an integer, not " + sig.dump(), line);
  if (sig.get<long long>() > SIGRTMAX)
    return bad("signal " + sig.dump() + " is out of range (1.." + std::to_string(SIGRTMAX) +
                   " kills, 0 or negative only logs)",
               line);

  out->version = kTimerProtocolVersion;
  out->pid = static_cast<pid_t>(pid.get<long long>());
  out->scope_id = scope.get<std::string>();
  out->expiration_time = expiration.get<double>();
  out->signal = static_cast<int>(std::max<long long>(sig.get<long long>(), INT_MIN));
  return Status::OK();
}

std::string format_timer_request(const TimerRequest& r) {
  nlohmann::ordered_json j;
  j["version"] = r.version;
  j["pid"] = r.pid;
  j["scope_id"] = r.scope_id;
  if (r.is_release())
    j["expiration_time"] = -1;  // as torch's FileTimerClient.release() writes it
  else
    j["expiration_time"] = r.expiration_time;
  j["signal"] = r.signal;
  return j.dump();
}

void TimerTable::arm(Timer timer) {
  auto key = std::make_pair(timer.pid, timer.scope_id);
  timers_[key] = std::move(timer);
}

bool TimerTable::disarm(pid_t pid, const std::string& scope_id) {
  return timers_.erase(std::make_pair(pid, scope_id)) > 0;
}

void TimerTable::clear(pid_t pid) {
  for (auto it = timers_.lower_bound({pid, std::string()}); it != timers_.end() && it->first.first == pid;)
    it = timers_.erase(it);
}

void TimerTable::shift(Clock::duration by) {
  for (auto& [key, t] : timers_) t.deadline += by;
}

std::optional<TimerTable::Clock::time_point> TimerTable::next_deadline() const {
  std::optional<Clock::time_point> next;
  for (const auto& [key, t] : timers_)
    if (!next || t.deadline < *next) next = t.deadline;
  return next;
}

std::vector<TimerTable::Expiry> TimerTable::take_expired(Clock::time_point now) {
  // pid -> its expired timers
  std::map<pid_t, std::vector<const Timer*>> by_pid;
  for (const auto& [key, t] : timers_)
    if (t.deadline <= now) by_pid[t.pid].push_back(&t);

  std::vector<Expiry> out;
  for (auto& [pid, timers] : by_pid) {
    std::stable_sort(timers.begin(), timers.end(),
                     [](const Timer* a, const Timer* b) { return a->deadline < b->deadline; });
    Expiry e;
    const Timer* decides = timers.front();
    for (const Timer* t : timers)
      if (t->signal > 0) {
        decides = t;
        break;
      }
    e.timer = *decides;
    e.first_deadline = timers.front()->deadline;
    for (const Timer* t : timers) e.scopes.push_back(t->scope_id);
    out.push_back(std::move(e));
  }
  for (const auto& e : out) clear(e.timer.pid);
  std::stable_sort(out.begin(), out.end(),
                   [](const Expiry& a, const Expiry& b) { return a.first_deadline < b.first_deadline; });
  return out;
}

}  // namespace hydro
