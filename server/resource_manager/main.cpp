// resource_manager: turns a set of executor-manager nodes into one service.
//
//   resource_manager --config config/resource_manager.json
//
// Opens the SQLite store, starts the loop thread and the REST API, prints
// "resource_manager: ready, REST on http://HOST:PORT" on stderr once it
// answers requests (tests wait for that line), and ends cleanly on SIGINT or
// SIGTERM. Exit status: 0 ok, 1 failure, 2 usage error.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>

#include <cxxopts.hpp>
#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "resource_manager/config.hpp"
#include "resource_manager/loop.hpp"
#include "resource_manager/registry.hpp"
#include "resource_manager/rest.hpp"
#include "resource_manager/store.hpp"

#ifndef RFAAS_VERSION
#define RFAAS_VERSION "unknown"
#endif

int main(int argc, char **argv) {
  auto logger = spdlog::stderr_color_mt("resource_manager");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e] [%n] [%l] %v");

  cxxopts::Options options("resource_manager",
                           "rFaaS resource manager: registers executor-manager nodes, grants "
                           "leases, keeps accounting, serves the operators' REST API.");
  options.add_options()("c,config", "configuration file (JSON, see config/README.md)",
                        cxxopts::value<std::string>())(
      "log-level", "trace, debug, info, warn, error (overrides log.level)",
      cxxopts::value<std::string>())("version", "print the version and exit")("h,help",
                                                                              "print this help");
  cxxopts::ParseResult args;
  try {
    args = options.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception &e) {
    std::fprintf(stderr, "resource_manager: %s (see --help)\n", e.what());
    return 2;
  }
  if (args.count("help")) {
    std::puts(options.help().c_str());
    return 0;
  }
  if (args.count("version")) {
    std::printf("resource_manager (rFaaS) %s\n", RFAAS_VERSION);
    return 0;
  }
  if (!args.count("config")) {
    std::fprintf(stderr, "resource_manager: --config FILE is required (example: "
                         "config/resource_manager.json)\n");
    return 2;
  }
  if (!args.unmatched().empty()) {
    std::fprintf(stderr, "resource_manager: unexpected argument '%s' (see --help)\n",
                 args.unmatched().front().c_str());
    return 2;
  }

  // Signals are taken by sigwait on this thread; every thread started below
  // inherits the blocked mask, so none of them is interrupted.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  try {
    auto cfg = rfaas::rm::ResourceManagerConfig::load(args["config"].as<std::string>());
    if (args.count("log-level")) {
      cfg.log_level = args["log-level"].as<std::string>();
      if (spdlog::level::from_str(cfg.log_level) == spdlog::level::off && cfg.log_level != "off") {
        std::fprintf(stderr,
                     "resource_manager: --log-level: expected trace, debug, info, warn, error, "
                     "critical or off, got '%s'\n",
                     cfg.log_level.c_str());
        return 2;
      }
    }
    spdlog::set_level(spdlog::level::from_str(cfg.log_level));
    spdlog::cfg::load_env_levels(); // SPDLOG_LEVEL wins, as in every rFaaS binary

    rfaas::rm::Store store(cfg.database);
    rfaas::rm::Registry registry(store, rfaas::rm::wall_clock_ms, cfg.registry);
    logger->info("database {} (schema {}, {}): {} node(s), {} active lease(s)", cfg.database,
                 store.schema_version(), store.journal_mode(), registry.nodes().size(),
                 registry.active_count());
    rfaas::rm::Loop loop(registry, std::chrono::milliseconds(cfg.tick_ms));
    loop.start();
    rfaas::rm::RestServer rest(loop, cfg.admin_token);
    rest.start(cfg.http_host, cfg.http_port, cfg.http_threads);
    std::fprintf(stderr, "resource_manager: ready, REST on http://%s:%u\n", cfg.http_host.c_str(),
                 rest.port());
    std::fflush(stderr);
    logger->info("placement {}, leases {} ms by default (at most {} ms), heartbeat timeout {} ms",
                 rfaas::rm::to_string(cfg.registry.policy), cfg.registry.default_lease_ms,
                 cfg.registry.max_lease_ms, cfg.registry.heartbeat_timeout_ms);

    int sig = 0;
    sigwait(&stop_signals, &sig);
    logger->info("{}: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rest.stop(); // no new requests; those in flight are answered by the loop
    loop.stop();
    logger->info("stopped");
    return 0;
  } catch (const std::exception &e) {
    logger->error("{}", e.what());
  }
  return 1;
}
