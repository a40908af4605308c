#pragma once
// `splash serve`'s HTTP side: mounts every endpoint on cpp-httplib, drives the Engine from one
// engine thread, and shuts down cleanly on SIGINT/SIGTERM.
#include <string>

#include "engine/engine.h"
#include "server/launch_info.h"
#include "server/server_options.h"
#include "server/signal_watcher.h"

namespace splash {

// Serves until a signal ends it; returns the process exit code. `signals` must have been created
// before the engine's threads.
int serve_http(Engine& engine, const ServerOptions& opt, const LaunchInfo& launch, SignalWatcher& signals);

}  // namespace splash
