// MUNGE credentials for the ranks' store: munged (which every Slurm cluster runs, with one key on
// every node) seals a payload with the caller's uid, and only a process of the same uid can open it.
#pragma once

#include <sys/types.h>

#include <string>

#include "hydro/status.h"

namespace hydro {

// A credential carrying `payload`, with this process's uid, that only this uid may decode.
Status munge_seal(const std::string& payload, std::string* credential);
// Checks `credential` (MAC, time to live, not replayed) and returns its payload and sender's uid.
Status munge_open(const std::string& credential, std::string* payload, uid_t* uid);

}  // namespace hydro
