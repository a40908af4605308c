#include "server/prometheus.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace splash {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t b = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  ++counts_[b];
  sum_ += v;
  ++count_;
}

std::vector<int64_t> Histogram::cumulative() const {
  std::vector<int64_t> c(counts_.size());
  int64_t run = 0;
  for (size_t i = 0; i < counts_.size(); ++i) c[i] = run += counts_[i];
  return c;
}

std::string prom_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

std::string prom_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void PromText::family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void PromText::sample(std::string_view name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i)
      out_ += fmt::format("{}{}=\"{}\"", i ? "," : "", labels[i].first, prom_escape(labels[i].second));
    out_ += '}';
  }
  out_ += ' ';
  out_ += prom_value(value);
  out_ += '\n';
}

void PromText::histogram(std::string_view name, const Labels& labels, const Histogram& h) {
  const std::vector<int64_t> c = h.cumulative();
  const std::string bucket = fmt::format("{}_bucket", name);
  for (size_t i = 0; i <= h.bounds().size(); ++i) {
    Labels l = labels;
    l.emplace_back("le", i < h.bounds().size() ? prom_value(h.bounds()[i]) : "+Inf");
    sample(bucket, l, static_cast<double>(c[i]));
  }
  sample(fmt::format("{}_sum", name), labels, h.sum());
  sample(fmt::format("{}_count", name), labels, static_cast<double>(h.count()));
}

}  // namespace splash
