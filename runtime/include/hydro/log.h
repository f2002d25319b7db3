// One line to stderr per message, written with a single write(2) so lines from threads and
// processes sharing a Slurm output file never interleave: "hydro[PID] HH:MM:SS.mmm: message".
#pragma once

#include <string>

namespace hydro {

void log_line(const std::string& who, const std::string& message);
inline void log(const std::string& message) { log_line("hydro", message); }

}  // namespace hydro
