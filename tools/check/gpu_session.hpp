#pragma once
// Device-side helpers for the checks, tests and benchmarks: a GPU's primary context (GPU 0's unless told), a stream and
// RAII device buffers, all through the dlopen'd driver.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "driver.hpp"
#include "flash_indexer/arch.hpp"

namespace flash_indexer::check {

// Makes GPU `device`'s primary context current for the calling thread; owns one stream.
class GpuSession {
 public:
  explicit GpuSession(int device = 0);
  ~GpuSession();
  GpuSession(const GpuSession&) = delete;
  GpuSession& operator=(const GpuSession&) = delete;
  CUstream stream() const { return stream_; }
  void synchronize() const;
  std::string device_name() const;
  int multiprocessors() const;
  Arch arch() const;  // the target the JIT compiles for on this device

 private:
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
    other.ptr_ = 0;
    other.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return reinterpret_cast<void*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* host, std::size_t bytes, std::size_t offset = 0);
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;
  void fill(std::uint8_t byte);

  template <class T>
  static DeviceBuffer from(const std::vector<T>& host) {
    DeviceBuffer b(std::max<std::size_t>(host.size() * sizeof(T), 16));
    if (!host.empty()) b.upload(host.data(), host.size() * sizeof(T));
    return b;
  }
  template <class T>
  std::vector<T> to_host(std::size_t count) const {
    std::vector<T> out(count);
    if (count) download(out.data(), count * sizeof(T));
    return out;
  }

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

}  // namespace flash_indexer::check
