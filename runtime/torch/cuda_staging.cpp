// Built only against a libtorch with CUDA (see cuda_staging.h).
#include "cuda_staging.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <utility>

#include "hydro/host_memory.h"

namespace hydro {

namespace {

Status cuda_failed(const char* call, cudaError_t e) {
  (void)cudaGetLastError();  // not left for the program's next call to find
  return Status::io(std::string(call) + ": " + cudaGetErrorString(e));
}

}  // namespace

CudaStaging::CudaStaging(std::function<void(const std::string&)> log) : staging_(calls(), std::move(log)) {}

CudaStaging::~CudaStaging() {
  (void)staging_.finish();
  drop_events();
}

StagingCalls CudaStaging::calls() {
  StagingCalls c;
  c.pin = [](uint64_t bytes, void** host) {
    const cudaError_t e = cudaHostAlloc(host, bytes, cudaHostAllocDefault);
    return e == cudaSuccess ? Status::OK() : cuda_failed("cudaHostAlloc", e);
  };
  c.unpin = [](void* host, uint64_t) { (void)cudaFreeHost(host); };
  c.host_available = [] { return host_memory_available(); };
  c.copy_out = [this](size_t item, void* host) { return copy_out(item, host); };
  c.wait = [this](size_t item) { return wait(item); };
  return c;
}

// After the work queued so far on the tensor's current stream (an event, not a device sync), on
// hydro's stream; the caching allocator keeps the tensor's memory until that copy is done.
Status CudaStaging::copy_out(size_t item, void* host) {
  const at::Tensor& t = sources_.at(item);
  const c10::DeviceIndex device = t.device().index();
  try {
    c10::cuda::CUDAGuard guard(device);
    auto it = streams_.find(device);
    if (it == streams_.end()) it = streams_.emplace(device, c10::cuda::getStreamFromPool(false, device)).first;
    cudaEvent_t made = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&made, cudaEventDisableTiming);
    if (e != cudaSuccess) return cuda_failed("cudaEventCreate", e);
    e = cudaEventRecord(made, c10::cuda::getCurrentCUDAStream(device).stream());
    if (e == cudaSuccess) e = cudaStreamWaitEvent(it->second.stream(), made, 0);
    (void)cudaEventDestroy(made);  // released once the wait is done
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(host, t.data_ptr(), t.nbytes(), cudaMemcpyDeviceToHost, it->second.stream());
    if (e != cudaSuccess) return cuda_failed("queuing the copy to host memory", e);
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), it->second);
    e = cudaEventCreateWithFlags(&done_.at(item), cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(done_[item], it->second.stream());
    return e == cudaSuccess ? Status::OK() : cuda_failed("cudaEventRecord", e);
  } catch (const c10::Error& e) {
    return Status::io(e.what_without_backtrace());
  }
}

Status CudaStaging::wait(size_t item) {
  if (!done_.at(item)) return Status::OK();
  const cudaError_t e = cudaEventSynchronize(done_[item]);
  return e == cudaSuccess ? Status::OK() : cuda_failed("cudaEventSynchronize", e);
}

void CudaStaging::drop_events() {
  for (cudaEvent_t& e : done_)
    if (e) (void)cudaEventDestroy(e);
  done_.clear();
}

Status CudaStaging::stage(const std::vector<at::Tensor>& tensors, std::vector<at::Tensor>* host) {
  (void)staging_.finish();  // the last stage's copies: its own ready() reported their errors
  drop_events();
  sources_.clear();
  std::vector<uint64_t> sizes;
  for (const at::Tensor& t : tensors) {
    if (!t.is_cuda()) return Status::invalid_argument("staging takes device tensors, not one on " + t.device().str());
    sources_.push_back(t.contiguous());
    sizes.push_back(static_cast<uint64_t>(sources_.back().nbytes()));
  }
  done_.assign(sources_.size(), nullptr);
  HYDRO_RETURN_IF_ERROR(staging_.stage(sizes));
  host->clear();
  for (size_t i = 0; i < sources_.size(); ++i)
    host->push_back(at::from_blob(staging_.slot(i), sources_[i].sizes(), sources_[i].options().device(at::kCPU)));
  return Status::OK();
}

}  // namespace hydro
