#include "calibrate/fit.h"

#include <algorithm>

#include "core/error.h"

namespace splash {

Curve make_curve(std::vector<std::pair<double, double>> points) {
  std::sort(points.begin(), points.end());
  Curve c;
  for (size_t i = 0; i < points.size();) {
    size_t j = i;
    double sum = 0;
    for (; j < points.size() && points[j].first == points[i].first; ++j) sum += points[j].second;
    c.x.push_back(points[i].first);
    c.y.push_back(sum / static_cast<double>(j - i));
    i = j;
  }
  return c;
}

CollectiveCost fit_collective(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  SPLASH_CHECK(bytes.size() == seconds.size() && !bytes.empty(), "fit_collective: {} sizes, {} times", bytes.size(),
               seconds.size());
  // Weighted normal equations of t = a + c x with weights 1 / t^2.
  double sw = 0, swx = 0, swxx = 0, swt = 0, swxt = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double x = bytes[i], t = std::max(seconds[i], 1e-12), w = 1.0 / (t * t);
    sw += w, swx += w * x, swxx += w * x * x, swt += w * t, swxt += w * x * t;
  }
  const double det = sw * swxx - swx * swx;
  double a = det > 0 ? (swt * swxx - swx * swxt) / det : 0;
  double c = det > 0 ? (sw * swxt - swx * swt) / det : 0;
  if (a < 0) a = 0, c = swxt / swxx;  // the best line through the origin
  if (c <= 0) c = 0, a = swt / sw;    // flat: the weighted mean time
  CollectiveCost out{a, 0};
  if (c > 0) {
    out.bytes_per_s = 1.0 / c;
  } else {
    // No time grows with bytes: the rate the largest buffer reached is a lower bound of the bandwidth.
    const size_t i = static_cast<size_t>(std::max_element(bytes.begin(), bytes.end()) - bytes.begin());
    out.bytes_per_s = bytes[i] / std::max(seconds[i], 1e-12);
  }
  return out;
}

}  // namespace splash
