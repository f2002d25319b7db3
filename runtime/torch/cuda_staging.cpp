// Issue 58, built only against a libtorch with CUDA: a checkpoint's copies of device tensors
// (snapshot.h's DeviceCopyCalls). Each goes on a stream of hydro's, after an event of the stream that
// made the tensor (not a device-wide sync), into host memory pinned by cudaHostAlloc; an event per
// copy is what TensorPool::finish() waits for. The caching allocator keeps the tensor's memory
// until its copy is done (recordStream).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <vector>

#include "snapshot.h"

namespace hydro {

namespace {

Status cuda_failed(const char* call, cudaError_t e) {
  (void)cudaGetLastError();  // not left for the program's next call to find
  return Status::io(std::string(call) + ": " + cudaGetErrorString(e));
}

// One pool's copies: hydro's stream on each device, and the event after each copy, by number.
struct CudaCopies {
  std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  std::vector<cudaEvent_t> done;

  c10::cuda::CUDAStream stream_on(c10::DeviceIndex device) {
    auto it = streams.find(device);
    if (it == streams.end()) it = streams.emplace(device, c10::cuda::getStreamFromPool(false, device)).first;
    return it->second;
  }

  Status after_the_work_on(c10::DeviceIndex device, cudaStream_t copies) {
    cudaEvent_t made = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&made, cudaEventDisableTiming);
    if (e != cudaSuccess) return cuda_failed("cudaEventCreate", e);
    e = cudaEventRecord(made, c10::cuda::getCurrentCUDAStream(device).stream());
    if (e == cudaSuccess) e = cudaStreamWaitEvent(copies, made, 0);
    (void)cudaEventDestroy(made);  // released once the wait is done
    return e == cudaSuccess ? Status::OK() : cuda_failed("cudaStreamWaitEvent", e);
  }

  Status queue(size_t copy, const at::Tensor& dst, const at::Tensor& src) {
    const c10::DeviceIndex device = src.device().index();
    try {
      c10::cuda::CUDAGuard guard(device);
      c10::cuda::CUDAStream stream = stream_on(device);
      HYDRO_RETURN_IF_ERROR(after_the_work_on(device, stream.stream()));
      cudaError_t e = cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(), cudaMemcpyDeviceToHost, stream);
      if (e != cudaSuccess) return cuda_failed("cudaMemcpyAsync", e);
      c10::cuda::CUDACachingAllocator::recordStream(src.storage().data_ptr(), stream);
      if (done.size() <= copy) done.resize(copy + 1, nullptr);
      e = cudaEventCreateWithFlags(&done[copy], cudaEventDisableTiming);
      if (e == cudaSuccess) e = cudaEventRecord(done[copy], stream.stream());
      return e == cudaSuccess ? Status::OK() : cuda_failed("cudaEventRecord", e);
    } catch (const c10::Error& e) {
      return Status::io(e.what_without_backtrace());
    }
  }

  Status wait(size_t copy) {
    if (copy >= done.size() || !done[copy]) return Status::OK();
    const cudaError_t e = cudaEventSynchronize(done[copy]);
    (void)cudaEventDestroy(done[copy]);
    done[copy] = nullptr;
    return e == cudaSuccess ? Status::OK() : cuda_failed("cudaEventSynchronize", e);
  }
};

}  // namespace

DeviceCopyCalls cuda_device_calls() {
  auto copies = std::make_shared<CudaCopies>();
  DeviceCopyCalls c;
  // A device this process uses (a context on it): a CPU job on a GPU machine stages nothing.
  c.present = [] {
    for (c10::DeviceIndex i = 0; i < c10::cuda::device_count(); ++i)
      if (c10::cuda::hasPrimaryContext(i)) return true;
    return false;
  };
  c.takes = [](const torch::Tensor& t) { return t.is_cuda(); };
  c.pin = [](uint64_t bytes, void** host) {
    const cudaError_t e = cudaHostAlloc(host, bytes, cudaHostAllocDefault);
    return e == cudaSuccess ? Status::OK() : cuda_failed("cudaHostAlloc", e);
  };
  c.unpin = [](void* host, uint64_t) { (void)cudaFreeHost(host); };
  c.queue = [copies](size_t copy, const torch::Tensor& dst, const torch::Tensor& src) {
    return copies->queue(copy, dst, src);
  };
  c.wait = [copies](size_t copy) { return copies->wait(copy); };
  return c;
}

}  // namespace hydro
