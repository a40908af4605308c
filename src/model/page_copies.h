#pragma once
// Whole-page copies inside one rank's latent pool, before a step computes: the first decode of a sample
// forked from a group's shared prompt writes into its own copy of the prompt's last, partial page.
#include <cstdint>
#include <span>
#include <utility>

#include "model/rank_env.h"

namespace splash {

// Copies every slot of page `src` to page `dst`, for each pair, on the compute stream.
void copy_pages(RankEnv& env, std::span<const std::pair<int32_t, int32_t>> copies);

}  // namespace splash
