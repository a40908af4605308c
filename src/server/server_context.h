#pragma once
// What every endpoint handler shares: the model's facts, the options, the engine thread's front
// door and the metrics. Handlers never reach the Engine itself.
#include <atomic>

#include "server/engine_loop.h"
#include "server/launch_info.h"
#include "server/metrics.h"
#include "server/model_info.h"
#include "server/server_options.h"

namespace splash {

struct ServerContext {
  ModelInfo model;
  ServerOptions options;
  EngineLoop& loop;
  ServerMetrics& metrics;
  const LaunchInfo& launch;  // the command line, for the info endpoints
  std::atomic<bool> draining{false};   // after SIGTERM: new requests get 503
  std::atomic<int> open_responses{0};  // generation responses still being written
};

}  // namespace splash
