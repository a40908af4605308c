#pragma once
// The server's routes, registered on the httplib::Server and remembered by method, so that a wrong
// method on a known path gets 405 with an Allow header (httplib 0.11 answers 404 and keeps its route
// tables private).
#include <regex>
#include <string>
#include <vector>

#include <httplib.h>

namespace splash {

class RouteTable {
 public:
  explicit RouteTable(httplib::Server& server) : server_(server) {}
  enum class Body { Required, None };
  // A GET route also serves HEAD.
  void get(const std::string& pattern, httplib::Server::Handler handler);
  // A POST route that takes no body (Body::None) also serves a request sent without Content-Length,
  // as `curl -X POST URL` sends it: see bodyless_post.
  void post(const std::string& pattern, httplib::Server::Handler handler, Body body = Body::Required);
  // The methods some route serves `path` with; empty when no route matches it.
  std::vector<std::string> allowed_methods(const std::string& path) const;
  // The handler of the body-less POST route matching `path`, or null. httplib reads a POST that has no
  // length until the peer closes, so the server runs such a request's handler before httplib reads.
  const httplib::Server::Handler* bodyless_post(const std::string& path) const;

 private:
  struct Route {
    std::regex pattern;
    std::vector<std::string> methods;
    httplib::Server::Handler bodyless;  // set for POST routes without a body
  };
  httplib::Server& server_;
  std::vector<Route> routes_;
};

}  // namespace splash
