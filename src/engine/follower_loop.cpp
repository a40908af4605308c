#include "engine/follower_loop.h"

#include <spdlog/spdlog.h>

#include "engine/group_command.h"

namespace splash {

void follow_leader(const std::shared_ptr<ProcessLink>& link, const ModelConfig& cfg, const WeightSource& weights) {
  std::unique_ptr<RankGroup> group;
  // The weights the ranks hold: the start's, or the last update's (a resume reloads them).
  std::shared_ptr<const WeightSource> updated;
  const WeightSource* current = &weights;
  auto need_group = [&]() -> RankGroup& {
    if (!group) fail_internal("process 0 sent a command before starting the group");
    return *group;
  };
  for (;;) {
    // Between commands a follower waits as long as process 0 does nothing (an idle server).
    GroupCommand c = decode_command(link->broadcast(std::string(), /*unbounded=*/true));
    try {
      switch (c.kind) {
        case CommandKind::Start: {
          group.reset();
          GroupOptions opt = c.options;
          opt.link = link;
          group = std::make_unique<RankGroup>(cfg, weights, opt);
          break;
        }
        case CommandKind::AllocateKv: need_group().allocate_kv(c.pages); break;
        case CommandKind::Run: need_group().run(c.plan, c.schedule ? &*c.schedule : nullptr); break;
        case CommandKind::Transfer: need_group().transfer(*c.schedule); break;
        case CommandKind::Synchronize: need_group().synchronize(); break;
        case CommandKind::LoadWeights: {
          std::shared_ptr<const WeightSource> opened = need_group().load_weights(c.load.origin ? nullptr : current, c.load);
          if (opened) current = (updated = std::move(opened)).get();
          break;
        }
        case CommandKind::ReleaseMemory: need_group().release_memory(); break;
        case CommandKind::EndGroup: group.reset(); break;
        case CommandKind::Stop: return;
      }
    } catch (const std::exception& e) {
      if (!link->lost().empty()) throw;  // process 0 is gone: nothing more will come
      spdlog::warn("process {}: a command failed (process 0 has the error too): {}", link->process(), e.what());
    }
  }
}

void stop_followers(ProcessLink& link) {
  if (!link.lost().empty()) return;
  try {
    link.broadcast(simple_command(CommandKind::Stop));
  } catch (const CommTimeout& e) {
    spdlog::error("stopping the other processes: {}", e.what());
  }
}

}  // namespace splash
