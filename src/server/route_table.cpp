#include "server/route_table.h"

#include <algorithm>
#include <utility>

namespace splash {

void RouteTable::get(const std::string& pattern, httplib::Server::Handler handler) {
  server_.Get(pattern, std::move(handler));
  routes_.push_back({std::regex(pattern), {"GET", "HEAD"}});
}

void RouteTable::post(const std::string& pattern, httplib::Server::Handler handler, Body body) {
  server_.Post(pattern, handler);
  routes_.push_back({std::regex(pattern), {"POST"}, body == Body::None ? std::move(handler) : nullptr});
}

const httplib::Server::Handler* RouteTable::bodyless_post(const std::string& path) const {
  for (const Route& r : routes_)
    if (r.bodyless && std::regex_match(path, r.pattern)) return &r.bodyless;
  return nullptr;
}

std::vector<std::string> RouteTable::allowed_methods(const std::string& path) const {
  std::vector<std::string> out;
  for (const Route& r : routes_)
    if (std::regex_match(path, r.pattern))
      for (const std::string& m : r.methods)
        if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  return out;
}

}  // namespace splash
