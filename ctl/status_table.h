// `hydroctl status DIR`: one line per checkpoint, verified against its manifest.
#pragma once

#include <string>

namespace hydro::ctl {

// Returns the table; sets *ok to false when the directory cannot be read.
std::string status_table(const std::string& dir, bool* ok);

}  // namespace hydro::ctl
