#include "hydro/job_state.h"

#include "metrics_json.h"

namespace hydro {
namespace {

nlohmann::json to_json(const EpochMetrics& e) {
  return {{"epoch", e.epoch}, {"step", e.step}, {"metrics", summary_to_json(e.metrics)}};
}

Status read_int(const nlohmann::json& j, const char* key, const std::string& where, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() < 0)
    return Status::corruption(where + ": '" + key + "' is missing or not a whole number >= 0");
  *out = it->get<int64_t>();
  return Status::OK();
}

}  // namespace

void JobState::add_history(EpochMetrics e) {
  history_json_.pop_back();  // the closing ']'
  if (!history_.empty()) history_json_ += ',';
  history_json_ += to_json(e).dump() + "]";
  history_.push_back(std::move(e));
}

std::string JobState::serialize() const {
  return std::string("{\"format\":\"") + kFormat + "\",\"epoch_start_step\":" + std::to_string(epoch_start_step) +
         ",\"metrics\":" + metrics.serialize() + ",\"history\":" + history_json_ + "}";
}

Status JobState::parse(const std::string& text, const std::string& where, JobState* out) {
  nlohmann::json j;
  HYDRO_RETURN_IF_ERROR(parse_json(text, where, &j));
  if (!j.is_object() || j.value("format", nlohmann::json()) != kFormat)
    return Status::corruption(where + ": format is not " + std::string(kFormat));
  JobState s;
  HYDRO_RETURN_IF_ERROR(read_int(j, "epoch_start_step", where, &s.epoch_start_step));
  auto m = j.find("metrics");
  if (m == j.end()) return Status::corruption(where + ": 'metrics' is missing");
  HYDRO_RETURN_IF_ERROR(MetricsTracker::parse(m->dump(), where, &s.metrics));
  auto h = j.find("history");
  if (h == j.end() || !h->is_array()) return Status::corruption(where + ": 'history' is missing or not a list");
  for (size_t i = 0; i < h->size(); ++i) {
    const std::string w = where + ": history[" + std::to_string(i) + "]";
    const nlohmann::json& e = (*h)[i];
    if (!e.is_object()) return Status::corruption(w + " is not an object");
    EpochMetrics em;
    HYDRO_RETURN_IF_ERROR(read_int(e, "epoch", w, &em.epoch));
    HYDRO_RETURN_IF_ERROR(read_int(e, "step", w, &em.step));
    auto mm = e.find("metrics");
    if (mm == e.end()) return Status::corruption(w + ": 'metrics' is missing");
    HYDRO_RETURN_IF_ERROR(summary_from_json(*mm, w, &em.metrics));
    s.add_history(std::move(em));
  }
  *out = std::move(s);
  return Status::OK();
}

}  // namespace hydro
