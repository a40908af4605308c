#pragma once
// cpp-httplib with its connection handling replaced. httplib's handlers are blocking: a stream
// waiting for tokens holds its thread, so a fixed pool (the old --threads-http 256) lets open
// streams starve /health and park further requests at the socket, outside the engine's queue.
// Here every accepted connection gets its own thread, up to a cap far above what the engine runs at
// once (threads are cheap up to thousands); requests queue in the engine, where the waiting gauge
// and --max-queued-requests see them. An idle keep-alive connection waits in poll() and is closed
// after the keep-alive timeout, so idle sockets do not pin threads for long.
// Owning the socket loop also gives handlers the socket: whether the client is still there
// (whatever the response's encoding) and closing the connection after an early error.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include <httplib.h>

namespace splash {

class ConnectionServer : public httplib::Server {
 public:
  // Connections beyond `max_connections` get 503 and are closed at once. `open_connections` counts
  // the connections being served (refused ones not), for the metrics gauge.
  ConnectionServer(size_t max_connections, std::atomic<int64_t>& open_connections);
  // bind_to_port with the kernel's longest accept queue: httplib 0.11 listens with a backlog of 5,
  // so a burst of connections overflows it and each dropped SYN costs its client a 1 s retry.
  bool bind(const std::string& host, int port);

 private:
  bool process_and_close_socket(socket_t sock) override;
};

// From a handler or content provider: false once the client of the calling thread's connection has
// closed or reset its end. Reads nothing (peeks), so it works whatever the response is doing.
bool client_connected();

// From the pre-routing handler, for a body of unknown length (chunked): reading more than
// `max_bytes` of it fails, the request is answered 413 (see body_limit_exceeded) and the connection closed.
void limit_body(size_t max_bytes);
// From the error handler: the failed request's body went over limit_body's limit.
bool body_limit_exceeded();

// From a handler (pre-routing included): this response ends the connection, because the request's
// body may be left unread and must not be parsed as the next request. Sends `Connection: close`;
// after the response the unread bytes are drained briefly so the client gets the response, not a reset.
void close_connection_after(httplib::Response& res);

}  // namespace splash
