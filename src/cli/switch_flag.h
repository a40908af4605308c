#pragma once
// `--switch step=5:dop,step=9:cp`: switch the attention layout before given engine steps.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "layout/layout.h"

namespace splash {

// Parses the flag's value into (step, layout) pairs; fails naming the item that is not step=N:LAYOUT.
std::vector<std::pair<int64_t, Layout>> parse_switch_schedule(const std::string& spec);

}  // namespace splash
