#pragma once
// say(m): one line of hydro-launch's own on its stderr ("hydro-launch[PID] TIME: m").
#include <string>

#include "hydro/log.h"

namespace hydro::launcher {

inline void say(const std::string& m) { log_line("hydro-launch", m); }

}  // namespace hydro::launcher
