#include "cli/switch_flag.h"

#include "core/error.h"

namespace splash {

std::vector<std::pair<int64_t, Layout>> parse_switch_schedule(const std::string& spec) {
  std::vector<std::pair<int64_t, Layout>> out;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(pos, end - pos);
    const size_t colon = item.find(':');
    auto bad = [&] { fail("--switch: '{}' is not step=N:LAYOUT (e.g. step=5:dop,step=9:cp)", item); };
    if (item.rfind("step=", 0) != 0 || colon == std::string::npos) bad();
    int64_t step = -1;
    try {
      size_t used = 0;
      step = std::stoll(item.substr(5, colon - 5), &used);
      if (used != colon - 5) bad();
    } catch (const std::exception&) {
      bad();
    }
    const auto layout = parse_layout(item.substr(colon + 1));
    if (step < 0 || !layout) bad();
    out.emplace_back(step, *layout);
    pos = end + 1;
  }
  return out;
}

}  // namespace splash
