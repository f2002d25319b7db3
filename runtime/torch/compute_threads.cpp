#include "compute_threads.h"

#include <dlfcn.h>

#include <ATen/Parallel.h>

namespace hydro {
namespace {

// OpenBLAS, where torch's BLAS is it (Debian's libtorch: libblas.so.3 from openblas-pthread,
// which loads libopenblas.so.0). Looked up, not linked: a torch built on MKL has none. Looked up
// once (a dlopen costs a checkpoint about 150 µs): torch's BLAS is loaded with libtorch, before
// hydro. The handle stays open, so the function stays where it is.
int openblas_threads() {
  using Getter = int (*)();
  static const Getter getter = [] {
    void* lib = ::dlopen("libopenblas.so.0", RTLD_LAZY | RTLD_NOLOAD);
    auto found = reinterpret_cast<Getter>(::dlsym(lib ? lib : RTLD_DEFAULT, "openblas_get_num_threads"));
    if (!found && lib) ::dlclose(lib);
    return found;
  }();
  const int n = getter ? getter() : 0;
  return n > 0 ? n : 0;
}

std::string count_change(const char* pool, int saved, int now) {
  if (saved <= 0 || now <= 0 || saved == now) return "";
  return std::string(pool) + " " + std::to_string(saved) + " then, " + std::to_string(now) + " now";
}

}  // namespace

ComputeThreads compute_threads() { return {at::get_num_threads(), openblas_threads()}; }

std::string compute_threads_note(const ComputeThreads& saved, const ComputeThreads& now) {
  std::string aten = count_change("ATen's threads", saved.aten, now.aten);
  std::string blas = count_change("OpenBLAS's threads", saved.blas, now.blas);
  if (aten.empty() && blas.empty()) return "";
  std::string what = aten.empty() ? blas : blas.empty() ? aten : aten + "; " + blas;
  return "warning: this run splits sums over other thread counts than the run that wrote the checkpoint (" + what +
         "), so its result may differ in the last bits from a run never interrupted. For bit-for-bit " +
         "resumes give every run the same CPUs (--cpus-per-task), or fix the counts: torch.set_num_threads(" +
         std::to_string(saved.aten) + ")" +
         (saved.blas > 0 ? " and OPENBLAS_NUM_THREADS=" + std::to_string(saved.blas) : std::string()) + ".";
}

}  // namespace hydro
