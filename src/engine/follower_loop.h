#pragma once
// The part of a process other than process 0 in a group that spans processes: it runs no scheduler, no
// server and no policy, only its ranks, doing what process 0's commands say (engine/group_command.h)
// through the same RankGroup calls, until process 0 says stop.
#include <memory>

#include "comm/process_link.h"
#include "config/model_config.h"
#include "model/weight_source.h"

namespace splash {

// Returns when process 0 says stop; throws when process 0 stops answering (the link is lost). A command that
// fails here fails on process 0 too (the outcome is shared), so it is logged and the loop goes on.
void follow_leader(const std::shared_ptr<ProcessLink>& link, const ModelConfig& cfg, const WeightSource& weights);

// Process 0: tells the other processes to stop (once its work is done, or failed). Quietly does nothing
// when the link is already lost.
void stop_followers(ProcessLink& link);

}  // namespace splash
