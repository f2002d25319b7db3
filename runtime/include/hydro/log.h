// One line to stderr per message, written with a single write(2) so lines from threads and
// processes sharing a Slurm output file never interleave: "hydro[PID] HH:MM:SS.mmm: message".
#pragma once

#include <string>

#include "hydro/status.h"

namespace hydro {

void log_line(const std::string& who, const std::string& message);
inline void log(const std::string& message) { log_line("hydro", message); }

// A commit that is visible but may not survive a power loss (Code::durability_uncertain) is a
// warning in the log, and done: OK. Any other status comes back as it is.
Status warn_if_durability_uncertain(Status st);

}  // namespace hydro
