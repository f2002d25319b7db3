#include "hydro/metrics.h"

#include <cmath>
#include <cstring>

#include "metrics_json.h"

namespace hydro {
namespace {

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }

Status read_number(const nlohmann::json& j, const std::string& key, const std::string& where, double* out) {
  auto it = j.find(key);
  if (it != j.end() && it->is_number()) {
    *out = it->get<double>();
    return Status::OK();
  }
  if (it != j.end() && it->is_string()) {
    const std::string s = it->get<std::string>();
    if (s == "inf" || s == "-inf" || s == "nan") {
      *out = s == "nan" ? std::nan("") : (s == "inf" ? HUGE_VAL : -HUGE_VAL);
      return Status::OK();
    }
  }
  return Status::corruption(where + ": '" + key + "' is missing or not a number");
}

}  // namespace

bool MetricStats::operator==(const MetricStats& o) const {
  return count == o.count && same_bits(sum, o.sum) && same_bits(min, o.min) && same_bits(max, o.max);
}

nlohmann::json exact_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

nlohmann::json summary_to_json(const MetricsSummary& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, st] : s)
    j[name] = {{"sum", exact_number(st.sum)},
               {"count", st.count},
               {"min", exact_number(st.min)},
               {"max", exact_number(st.max)}};
  return j;
}

Status summary_from_json(const nlohmann::json& j, const std::string& where, MetricsSummary* out) {
  if (!j.is_object()) return Status::corruption(where + ": 'metrics' is not an object");
  MetricsSummary s;
  for (const auto& [name, v] : j.items()) {
    const std::string w = where + ": metric '" + name + "'";
    if (!v.is_object()) return Status::corruption(w + " is not an object");
    MetricStats st;
    auto count = v.find("count");
    if (count == v.end() || !count->is_number_integer() || count->get<int64_t>() < 1)
      return Status::corruption(w + ": 'count' is missing or not a whole number above 0");
    st.count = count->get<int64_t>();
    HYDRO_RETURN_IF_ERROR(read_number(v, "sum", w, &st.sum));
    HYDRO_RETURN_IF_ERROR(read_number(v, "min", w, &st.min));
    HYDRO_RETURN_IF_ERROR(read_number(v, "max", w, &st.max));
    s[name] = st;
  }
  *out = std::move(s);
  return Status::OK();
}

Status parse_json(const std::string& text, const std::string& where, nlohmann::json* out) {
  try {
    *out = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return Status::corruption(where + ": not JSON (syntax error at byte " + std::to_string(e.byte) + ")");
  }
  return Status::OK();
}

void MetricsTracker::add(const std::string& name, double value) {
  MetricStats& s = stats_[name];
  s.sum += value;
  s.count += 1;
  if (value < s.min) s.min = value;
  if (value > s.max) s.max = value;
}

double MetricsTracker::mean(const std::string& name) const {
  auto it = stats_.find(name);
  return it == stats_.end() ? std::nan("") : it->second.mean();
}

std::vector<std::string> MetricsTracker::names() const {
  std::vector<std::string> out;
  for (const auto& kv : stats_) out.push_back(kv.first);
  return out;
}

Status MetricsTracker::merge(const MetricsTracker& other) {
  for (const auto& kv : stats_)
    if (!other.stats_.count(kv.first))
      return Status::invalid_argument("merging metrics: '" + kv.first +
                                      "' is missing from the other tracker: every rank must add() the same names");
  for (const auto& kv : other.stats_)
    if (!stats_.count(kv.first))
      return Status::invalid_argument("merging metrics: '" + kv.first +
                                      "' is only in the other tracker: every rank must add() the same names");
  for (auto& [name, s] : stats_) {
    const MetricStats& o = other.stats_.at(name);
    s.sum += o.sum;
    s.count += o.count;
    if (o.min < s.min) s.min = o.min;
    if (o.max > s.max) s.max = o.max;
  }
  return Status::OK();
}

std::string MetricsTracker::serialize() const {
  nlohmann::json j;
  j["format"] = kFormat;
  j["metrics"] = summary_to_json(stats_);
  return j.dump();
}

Status MetricsTracker::parse(const std::string& text, const std::string& where, MetricsTracker* out) {
  nlohmann::json j;
  HYDRO_RETURN_IF_ERROR(parse_json(text, where, &j));
  if (!j.is_object() || j.value("format", nlohmann::json()) != kFormat)
    return Status::corruption(where + ": format is not " + std::string(kFormat));
  auto m = j.find("metrics");
  if (m == j.end()) return Status::corruption(where + ": 'metrics' is missing");
  MetricsTracker t;
  HYDRO_RETURN_IF_ERROR(summary_from_json(*m, where, &t.stats_));
  *out = std::move(t);
  return Status::OK();
}

}  // namespace hydro
