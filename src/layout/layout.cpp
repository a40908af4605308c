#include "layout/layout.h"

namespace splash {

std::string_view layout_name(Layout l) {
  switch (l) {
    case Layout::TP: return "tp";
    case Layout::DP: return "dp";
    case Layout::CP: return "cp";
    case Layout::DOP: return "dop";
  }
  return "?";
}

std::optional<Layout> parse_layout(std::string_view s) {
  for (Layout l : kAllLayouts)
    if (s == layout_name(l)) return l;
  return std::nullopt;
}

}  // namespace splash
