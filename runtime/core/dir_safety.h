// Whom a checkpoint directory trusts: its root's owner and mode, and which staging directories
// belong to writers that are gone (and may be removed).
#pragma once

#include <string>

#include "hydro/status.h"

namespace hydro {

// The root must be a directory owned by the caller with no group or other write permission, and
// no directory above it may be writable by everyone without the sticky bit: anyone else who could
// write there could plant a `latest` and a checkpoint that the job loads (xxh64 is a checksum,
// not a signature), or swap a directory for a symlink while old checkpoints are pruned.
// Symlinks in the path are followed: they are the caller's own (this runs as the job's user).
Status check_root_trusted(const std::string& root);

// ".<pid>.<seq>@<host>": a name private to this process and machine; two writers never collide.
std::string private_suffix();

// Whether the writer of a staging (or `latest` link) name under `root` may still be writing:
// a writer on this machine while its pid lives; a writer on another machine (a shared directory)
// always, unless its staging was last changed over a day ago (no save takes that long).
bool writer_alive(const std::string& root, const std::string& name);

}  // namespace hydro
