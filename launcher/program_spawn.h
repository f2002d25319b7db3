// Starting the training program: in its own process group, with the readiness pipe, and with the
// pause signals held until its runtime is up.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "hydro/signal_map.h"

namespace hydro::launcher {

// `ready_fd`: the write end of the readiness pipe (hydro/launch_ready.h), kept open in the child.
// The program starts with hydro-launch's own mask, holding `held` (SignalMap::blocked_for_job,
// SignalMap::hold): a pause forwarded before its runtime is up waits instead of killing it.
pid_t spawn(const std::vector<std::string>& command, const sigset_t& old_mask, const sigset_t& held, int ready_fd);

// The program's pause signals, to start it with blocked, unless it will not pause.
sigset_t held_signals(const SignalMap& map);

}  // namespace hydro::launcher
