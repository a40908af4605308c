#pragma once
// Server metrics for Prometheus: counters and latency histograms fed by the engine thread, plus
// the engine snapshot's gauges, rendered by GET /metrics. Names follow vLLM's where they overlap.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "engine/engine.h"
#include "server/engine_snapshot.h"
#include "server/prometheus.h"

namespace splash {

class ServerMetrics {
 public:
  ServerMetrics();

  void record_admitted(int64_t prompt_tokens);
  void record_generated(int64_t tokens);
  int64_t generated_tokens() const;  // so far (/health_generate watches it)
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  // A finished request: its time waiting for its first step and from arrival to the end.
  void record_finished(FinishReason why, double queue_seconds, double e2e_seconds);
  // A completed or refused layout switch, as the engine logs it.
  void record_switch(const SwitchRecord& r);

  std::string render(const EngineSnapshot& s) const;

  // Client connections being served, kept by the HTTP server.
  std::atomic<int64_t> open_connections{0};

 private:
  mutable std::mutex mu_;
  int64_t requests_ = 0, prompt_tokens_ = 0, generated_tokens_ = 0;
  std::map<FinishReason, int64_t> finished_;
  // By (from, to, reason): forced, scripted, faster (auto).
  std::map<std::tuple<Layout, Layout, std::string>, int64_t> switches_, refusals_;
  Histogram ttft_, itl_, queue_time_, e2e_latency_, switch_seconds_;
};

}  // namespace splash
