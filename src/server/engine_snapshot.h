#pragma once
// The engine's state as the HTTP side may see it: copied by the engine thread after every
// iteration, read by /metrics and /layout without touching the Engine.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "layout/layout.h"

namespace splash {

struct RankSnapshot {
  // used: pages running requests hold; cached: pages only the prefix cache holds (evicted on demand).
  int64_t pages_capacity = 0, pages_used = 0, pages_free = 0, pages_cached = 0;
  std::vector<std::string> owned;  // request ids (rid) of the running requests this rank owns
};

struct EngineSnapshot {
  Layout layout = Layout::TP;
  std::string policy;  // fixed, scripted, auto
  bool pinned = false;  // a forced layout holds the scheduler off
  std::optional<LayoutForecast> forecast;  // auto: the scheduler's latest prediction
  int64_t running = 0, waiting = 0;
  int64_t preemptions = 0;
  bool prefix_cache = false;
  bool paused = false;  // /pause_generation
  bool memory_released = false;  // /release_memory_occupation
  std::string weight_version;
  int64_t prefix_queried_tokens = 0, prefix_hit_tokens = 0;  // prompt tokens looked up, found
  int page_size = 0, layers = 0;
  std::string kv_cache_dtype;  // the cache's element as it runs: f32 | bf16 | fp8_e4m3
  std::vector<RankSnapshot> ranks;
  std::vector<SwitchRecord> switches;  // the most recent ones, oldest first
};

}  // namespace splash
