#pragma once
// From measured points to the profile's forms: curves and collective latency/bandwidth fits.
#include <utility>
#include <vector>

#include "cost/cost_profile.h"

namespace splash {

// (x, y) points -> a Curve with strictly increasing x; the y of equal x are averaged.
Curve make_curve(std::vector<std::pair<double, double>> points);

// latency + bytes / bandwidth fitted to (bytes, seconds) points by least squares of the relative error
// (so the small buffers fix the latency and the large ones the bandwidth), both terms non-negative.
CollectiveCost fit_collective(const std::vector<double>& bytes, const std::vector<double>& seconds);

}  // namespace splash
