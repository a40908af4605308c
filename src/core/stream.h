#pragma once
// Streams and events as opaque handles: on the CPU work completes when the call returns, so both are
// no-ops there; the CUDA backend maps them to cudaStream_t / cudaEvent_t. Code that overlaps transfer
// with compute is written once against these handles.
namespace splash {

struct Stream {
  void* handle = nullptr;  // null = the backend's default (compute) stream
};

struct Event {
  void* handle = nullptr;
};

}  // namespace splash
