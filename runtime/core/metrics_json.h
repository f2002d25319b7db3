// Private to the core: metrics as JSON, shared by the tracker, the job state and the progress file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "hydro/metrics.h"

namespace hydro {

// A double exactly: a JSON number when finite, else "inf", "-inf" or "nan".
nlohmann::json exact_number(double v);
// {"loss": {"count": 3, "max": 2.5, "min": 0.5, "sum": 4.5}, ...}
nlohmann::json summary_to_json(const MetricsSummary& s);
// `where` names the source in errors.
Status summary_from_json(const nlohmann::json& j, const std::string& where, MetricsSummary* out);
// Parses `text` as JSON: "where: not JSON (syntax error at byte N)".
Status parse_json(const std::string& text, const std::string& where, nlohmann::json* out);

}  // namespace hydro
