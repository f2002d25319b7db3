// How many threads split the sums of this process's operators. BLAS and ATen split a sum by thread
// count, so a run resumed with other counts may differ in the last bits from a run never
// interrupted (see docs/users-guide-slurm.md, "What bit-for-bit needs").
#pragma once

#include <string>

namespace hydro {

struct ComputeThreads {
  int aten = 0;  // ATen's intra-op pool (at::get_num_threads; it also sizes MKL)
  int blas = 0;  // OpenBLAS's own pool, which at::set_num_threads leaves alone; 0: not OpenBLAS
};

ComputeThreads compute_threads();

// The warning for a resume whose counts differ from the checkpoint's; "" when they match or the
// checkpoint recorded none.
std::string compute_threads_note(const ComputeThreads& saved, const ComputeThreads& now);

}  // namespace hydro
