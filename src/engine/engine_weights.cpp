// The Engine's weights and their memory between rollouts: an update from disk, and releasing and resuming
// the memory of weights and KV for a colocated trainer.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/config_difference.h"
#include "core/error.h"
#include "engine/engine.h"

namespace splash {

void Engine::settle_switch() {
  try {
    switcher_->settle();
  } catch (const std::exception& e) {
    broken_ = e.what();  // its layers were half handed over
    throw;
  }
}

void Engine::drop_prefix_cache() {
  group_->kv().drop_prefix_cache();
  leaders_.clear();
}

void Engine::update_weights(const WeightOrigin& origin, std::string version) {
  if (!broken_.empty()) fail_internal("the engine stopped after a failed layout switch: {}", broken_);
  if (memory_released()) fail("the memory of weights and KV is released: resume it before updating the weights");
  ModelSource next = open_model(origin.model, origin.load_format, origin.seed);
  if (const std::string d = config_difference(model_.config, next.config); !d.empty())
    fail("{} is not a checkpoint of the served model's architecture ({} differs); the server keeps its weights",
         origin.model, d);
  settle_switch();
  group_->reload_weights(*next.weights, origin, layout());
  model_.weights = std::move(next.weights);
  drop_prefix_cache();
  ++weight_updates_;
  weight_version_ = version.empty() ? std::to_string(weight_updates_) : std::move(version);
  spdlog::info("weights updated from {} (load format {}): weight version {}", origin.model, origin.load_format,
               weight_version_);
}

void Engine::release_memory() {
  if (memory_released()) fail("the memory of weights and KV is already released");
  if (has_work() || waiting() > 0)
    fail("{} requests run and {} wait: releasing the memory needs an idle engine", scheduler_.running(), waiting());
  settle_switch();
  drop_prefix_cache();  // the KV it names goes with the storage
  group_->release_memory();
  spdlog::info("released the memory of weights and KV");
}

void Engine::resume_memory() {
  if (!memory_released()) fail("the memory of weights and KV is not released");
  group_->restore_memory(*model_.weights, layout());
  spdlog::info("resumed the memory of weights and KV in layout {}", layout_name(layout()));
}

}  // namespace splash
