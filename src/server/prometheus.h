#pragma once
// Prometheus text exposition format (version 0.0.4): what /metrics writes, no client library needed.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace splash {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Cumulative-bucket histogram; not thread-safe (the owner locks).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implied
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Observations <= bounds()[i]; the last entry (+Inf) is count().
  std::vector<int64_t> cumulative() const;
  double sum() const { return sum_; }
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; last is (bounds_.back(), +Inf)
  double sum_ = 0;
  int64_t count_ = 0;
};

class PromText {
 public:
  // Starts a metric family: "# HELP" and "# TYPE" lines (type: counter, gauge, histogram).
  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, const Labels& labels, double value);
  void histogram(std::string_view name, const Labels& labels, const Histogram& h);
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// Integers without a decimal point, "+Inf"/"-Inf"/"NaN" as Prometheus spells them.
std::string prom_value(double v);
// Backslash, double quote and newline escaped, as label values need.
std::string prom_escape(std::string_view s);

}  // namespace splash
