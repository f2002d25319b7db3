// Running a command and reading what it prints: hydroctl and hydro-launch ask Slurm's commands
// (scontrol, scancel) this way. Core only.
#pragma once

#include <string>
#include <vector>

namespace hydro {

// Runs argv[0] (found on PATH) with its arguments and no signal blocked, its stdout into *out;
// stderr passes through.
// Returns its exit status, 128 if a signal ended it, 127 if it could not run, -1 if no pipe or
// process could be made.
int run_capture(const std::vector<std::string>& argv, std::string* out);

}  // namespace hydro
