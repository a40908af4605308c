#pragma once
// How close the reference's expert choices are to ties. A bf16 engine's router scores differ from an
// f32 reference's by bf16 noise; where a token's routing slack (cpu::RoutedRow) is below that noise the
// engine may choose other experts there, and its logits then differ from the reference's by O(1)
// while the engine is correct. The f32 CPU backend reproduces the reference, so it measures the slack,
// and records the reference's expert choices for splash check --replay-routing.
#include <vector>

#include "check/routing_replay.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/model_source.h"

namespace splash {

// Every MoE layer's routed rows ([MoE layer in layer order][position]) of each sequence, from an f32
// CPU run (the real Engine, one rank, a RoutingHook observing the router) of the sequences whole.
using RoutedSequence = std::vector<std::vector<cpu::RoutedRow>>;
std::vector<RoutedSequence> record_routing(const ModelSource& model,
                                           const std::vector<std::vector<int32_t>>& seqs);

// The expert choices of record_routing, sequence i as request id i: what splash check
// --replay-routing feeds the engine under test.
RoutingReplay record_routing_replay(const ModelSource& model,
                                    const std::vector<std::vector<int32_t>>& seqs);

// Per prompt, per position: the smallest routing slack over the MoE layers in an f32 run (infinite
// for a model without MoE layers).
std::vector<std::vector<float>> reference_routing_slack(const ModelSource& model,
                                                        const std::vector<std::vector<int32_t>>& prompts);

}  // namespace splash
