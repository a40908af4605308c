#pragma once
// Order statistics of repeated measurements.
#include <algorithm>
#include <vector>

namespace splash {

// The q-quantile (0..1) by nearest rank; 0 for no samples.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace splash
