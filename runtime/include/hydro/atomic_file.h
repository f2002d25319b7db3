// One file replaced atomically and durably (cycling_utils' atomic_torch_save, with the fsyncs it
// lacks): the bytes go to a private temporary name in the same directory, are fsynced, renamed
// over `path`, and the directory is fsynced. A reader of `path` sees the old file or the whole new
// one, never a part; a crash leaves at most a `.<name>.tmp-<pid>.<n>` file, never a torn `path`.
#pragma once

#include <functional>
#include <string>

#include "hydro/durable_fs.h"
#include "hydro/status.h"

namespace hydro {

// `fill` writes the contents through the file it is given. On any failure the temporary file is
// removed and `path` is untouched (Code::io). A failed directory fsync after the rename is
// Code::durability_uncertain: the new file is in place but may not survive a power loss.
Status write_file_atomic(const std::string& path, const std::function<Status(WritableFile&)>& fill,
                         Fs& fs = posix_fs());

}  // namespace hydro
