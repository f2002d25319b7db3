// Issue 58, built only against a libtorch with CUDA: a checkpoint's copies of device tensors
// (snapshot.h's DeviceCopyCalls), and a resume's back. Each goes on a stream of hydro's, after an
// event of the stream that made the tensor (not a device-wide sync), into (or from) host memory
// pinned by cudaHostAlloc; an event per copy is what TensorPool::finish() waits for. The caching allocator keeps the
// tensor's memory until its copy is done (recordStream). Every call runs on a device this process already uses, so none
// creates a context (hundreds of MB) on another, as torch's own pinned allocator does.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "operator_pause.h"
#include "snapshot.h"

namespace hydro {

namespace {

Status cuda_failed(const char* call, cudaError_t e) {
  (void)cudaGetLastError();  // not left for the program's next call to find
  return Status::io(std::string(call) + ": " + cudaGetErrorString(e));
}

// On a device with a context already (the first this process uses), or as it is where it uses
// none, or where CUDA can no longer say (a buffer given back as the process exits).
struct OnAUsedDevice {
  std::optional<c10::cuda::CUDAGuard> guard;
  OnAUsedDevice() {
    try {
      const std::vector<int> used = devices_in_use();
      if (!used.empty()) guard.emplace(static_cast<c10::DeviceIndex>(used.front()));
    } catch (const std::exception&) {
    }
  }
};

// One pool's copies: hydro's stream on each device, and each copy's device and event, by number.
struct CudaCopies {
  std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  std::vector<std::pair<c10::DeviceIndex, cudaEvent_t>> done;

  c10::cuda::CUDAStream stream_on(c10::DeviceIndex device) {
    auto it = streams.find(device);
    if (it == streams.end()) it = streams.emplace(device, c10::cuda::getStreamFromPool(false, device)).first;
    return it->second;
  }

  static Status after_the_work_on(c10::DeviceIndex device, cudaStream_t copies) {
    cudaEvent_t made = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&made, cudaEventDisableTiming);
    if (e != cudaSuccess) return cuda_failed("cudaEventCreate", e);
    e = cudaEventRecord(made, c10::cuda::getCurrentCUDAStream(device).stream());
    if (e == cudaSuccess) e = cudaStreamWaitEvent(copies, made, 0);
    (void)cudaEventDestroy(made);  // released once the wait is done
    return e == cudaSuccess ? Status::OK() : cuda_failed("cudaStreamWaitEvent", e);
  }

  // After the copy was queued: its event, or, where that fails, the stream waited for here, so
  // that no copy is left writing into memory its caller lets go of.
  Status mark_done(size_t copy, c10::DeviceIndex device, c10::cuda::CUDAStream stream) {
    if (done.size() <= copy) done.resize(copy + 1, {device, nullptr});
    done[copy] = {device, nullptr};
    cudaError_t e = cudaEventCreateWithFlags(&done[copy].second, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(done[copy].second, stream.stream());
    if (e == cudaSuccess) return Status::OK();
    Status failed = cuda_failed("cudaEventRecord", e);
    (void)cudaStreamSynchronize(stream.stream());
    if (done[copy].second) (void)cudaEventDestroy(done[copy].second);
    done[copy].second = nullptr;
    return failed;
  }

  // A save's copy (src on the device) or a resume's (dst on the device, src its pinned slot).
  Status queue(size_t copy, const at::Tensor& dst, const at::Tensor& src) {
    const bool to_host = src.is_cuda();
    const at::Tensor& on_device = to_host ? src : dst;
    const c10::DeviceIndex device = on_device.device().index();
    try {
      c10::cuda::CUDAGuard guard(device);
      c10::cuda::CUDAStream stream = stream_on(device);
      HYDRO_RETURN_IF_ERROR(after_the_work_on(device, stream.stream()));
      cudaError_t e = cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(),
                                      to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, stream);
      if (e != cudaSuccess) return cuda_failed("cudaMemcpyAsync", e);
      c10::cuda::CUDACachingAllocator::recordStream(on_device.storage().data_ptr(), stream);
      return mark_done(copy, device, stream);
    } catch (const std::exception& e) {
      return Status::io(std::string(to_host ? "queuing a copy to host memory: " : "queuing a copy to the device: ") +
                        e.what());
    }
  }

  Status wait(size_t copy) {
    if (copy >= done.size() || !done[copy].second) return Status::OK();
    c10::cuda::CUDAGuard guard(done[copy].first);
    const cudaError_t e = cudaEventSynchronize(done[copy].second);
    (void)cudaEventDestroy(done[copy].second);
    done[copy].second = nullptr;
    return e == cudaSuccess ? Status::OK() : cuda_failed("cudaEventSynchronize", e);
  }
};

}  // namespace

DeviceCopyCalls cuda_device_calls() {
  auto copies = std::make_shared<CudaCopies>();
  DeviceCopyCalls c;
  c.present = [] { return !devices_in_use().empty(); };  // a CPU job on a GPU machine stages nothing
  c.takes = [](const torch::Tensor& t) { return t.is_cuda(); };
  c.pin = [](uint64_t bytes, void** host) {
    OnAUsedDevice on;
    const cudaError_t e = cudaHostAlloc(host, bytes, cudaHostAllocDefault);
    return e == cudaSuccess ? Status::OK() : cuda_failed("cudaHostAlloc", e);
  };
  c.unpin = [](void* host, uint64_t) {
    OnAUsedDevice on;
    (void)cudaFreeHost(host);
  };
  c.queue = [copies](size_t copy, const torch::Tensor& dst, const torch::Tensor& src) {
    return copies->queue(copy, dst, src);
  };
  c.wait = [copies](size_t copy) { return copies->wait(copy); };
  return c;
}

}  // namespace hydro
