#include "gpu_session.hpp"

#include <algorithm>

#include "kernel_registry.hpp"

namespace flash_indexer::check {

GpuSession::GpuSession(int device) {
  FI_CU(cuDeviceGet, "GpuSession", &device_, device);
  FI_CU(cuDevicePrimaryCtxRetain, "GpuSession", &context_, device_);
  FI_CU(cuCtxSetCurrent, "GpuSession", context_);
  FI_CU(cuStreamCreate, "GpuSession", &stream_, CU_STREAM_NON_BLOCKING);
}

GpuSession::~GpuSession() {
  const auto& cu = driver::api();
  if (stream_ != nullptr) cu.cuStreamDestroy(stream_);
  if (context_ != nullptr) cu.cuDevicePrimaryCtxRelease(device_);
}

void GpuSession::synchronize() const { FI_CU(cuStreamSynchronize, "GpuSession", stream_); }

std::string GpuSession::device_name() const {
  char name[256] = {};
  FI_CU(cuDeviceGetName, "GpuSession", name, sizeof name, device_);
  return name;
}

int GpuSession::multiprocessors() const {
  int count = 0;
  FI_CU(cuDeviceGetAttribute, "GpuSession", &count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_);
  return count;
}

Arch GpuSession::arch() const { return current_device_arch(); }

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  FI_CU(cuMemAlloc, "DeviceBuffer", &ptr_, std::max<std::size_t>(bytes, 1));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != 0) driver::api().cuMemFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != 0) driver::api().cuMemFree(ptr_);
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    other.ptr_ = 0;
    other.bytes_ = 0;
  }
  return *this;
}

// These run on the legacy default stream, which does not order against the session's non-blocking
// stream, and a memset or a copy from pageable memory may still be in flight when it returns: each waits
// for the whole context, so a kernel enqueued next never reads (or races) a buffer being written, and a
// download sees finished results. Without it the checks fail at random when many test processes
// share the GPU.
void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) {
  FI_CU(cuMemcpyHtoD, "DeviceBuffer::upload", ptr_ + offset, host, bytes);
  FI_CU(cuCtxSynchronize, "DeviceBuffer::upload");
}

void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  FI_CU(cuCtxSynchronize, "DeviceBuffer::download");
  FI_CU(cuMemcpyDtoH, "DeviceBuffer::download", host, ptr_ + offset, bytes);
}

void DeviceBuffer::fill(std::uint8_t byte) {
  FI_CU(cuMemsetD8, "DeviceBuffer::fill", ptr_, byte, bytes_);
  FI_CU(cuCtxSynchronize, "DeviceBuffer::fill");
}

}  // namespace flash_indexer::check
