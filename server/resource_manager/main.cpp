// resource_manager: turns a set of executor-manager nodes into one service.
//
//   resource_manager --config config/resource_manager.json
//
// Opens the SQLite store, opens the fabric and listens for nodes and clients
// (the "fabric" block), starts the loop thread and the REST API, prints
// "resource_manager: fabric on HOST:PORT (provider P)" and then
// "resource_manager: ready, REST on http://HOST:PORT" on stderr once it
// answers requests (tests wait for that line), and ends cleanly on SIGINT or
// SIGTERM. Exit status: 0 ok, 1 failure, 2 usage error.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "options.hpp"
#include <rdmalib/log.hpp>
#include <rdmalib/logger.hpp>
#include <spdlog/spdlog.h>

#include "cli.hpp"
#include "resource_manager/config.hpp"
#include "resource_manager/fabric_server.hpp"
#include "resource_manager/loop.hpp"
#include "resource_manager/registry.hpp"
#include "resource_manager/rest.hpp"
#include "resource_manager/slurm_provider.hpp"
#include "resource_manager/store.hpp"

int main(int argc, char **argv) {
  // Every spdlog call of this process goes to the "resource_manager" logger.
  auto logger = rdmalib::log::get("resource_manager");
  spdlog::set_default_logger(logger);

  rfaas::cli::Options options("resource_manager",
                              "rFaaS resource manager: registers executor-manager nodes, grants "
                              "leases, keeps accounting, serves the operators' REST API.");
  options.add_options()("c,config", "configuration file (JSON, see config/README.md)",
                        rfaas::cli::value<std::string>());
  rfaas::cli::add_standard_options(options);
  return rfaas::cli::run(
      "resource_manager", options, argc, argv, [&](const rfaas::cli::ParseResult &args) {
        if (!args.count("config"))
          throw rfaas::cli::UsageError(
              "--config FILE is required (example: config/resource_manager.json)");
        if (!args.unmatched().empty())
          throw rfaas::cli::UsageError("unexpected argument '" + args.unmatched().front() + "'");
        // A bad --log-level is a usage error even if the configuration is broken.
        if (args.count("log-level") &&
            !rdmalib::log::parse_level(args["log-level"].as<std::string>()))
          rfaas::cli::apply_log_level(args);

        // Signals are taken by sigwait on this thread; every thread started
        // below inherits the blocked mask, so none of them is interrupted.
        sigset_t stop_signals;
        sigemptyset(&stop_signals);
        sigaddset(&stop_signals, SIGINT);
        sigaddset(&stop_signals, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

        auto cfg = rfaas::rm::ResourceManagerConfig::load(args["config"].as<std::string>());
        // --log-level, then RFAAS_LOG_LEVEL, then log.level.
        rfaas::cli::apply_log_level(args, cfg.log_level);

        rfaas::rm::Store store(cfg.database);
        rfaas::rm::Registry registry(store, rfaas::rm::wall_clock_ms, cfg.registry);
        logger->info("database {} (schema {}, {}): {} node(s), {} active lease(s)", cfg.database,
                     store.schema_version(), store.journal_mode(), registry.nodes().size(),
                     registry.active_count());
        rfaas::rm::Loop loop(registry, std::chrono::milliseconds(cfg.tick_ms));
        loop.set_call_timeout(std::chrono::milliseconds(cfg.http_loop_timeout_ms));
        std::unique_ptr<rfaas::rm::FabricServer> fabric;
        if (cfg.fabric.enabled) {
          auto db = rdmalib::DeviceDatabase::load(cfg.fabric.device_database);
          fabric =
              std::make_unique<rfaas::rm::FabricServer>(db.find(cfg.fabric.device), cfg.fabric);
          loop.attach(fabric.get());
          loop.set_busy_poll(std::chrono::microseconds(cfg.fabric.busy_poll_us));
        } else {
          logger->warn("no \"fabric\" block in the configuration: REST only, no node can "
                       "register and no client can lease");
        }
        // nodes.provider "slurm": pilot jobs bring the nodes (slurm_provider.hpp).
        std::unique_ptr<rfaas::rm::SlurmProvider> provider;
        if (cfg.node_provider == rfaas::rm::NodeProviderKind::Slurm) {
          std::string rm_address = cfg.slurm.resource_manager_address;
          if (rm_address.empty())
            rm_address = fabric->address().to_string();
          provider = std::make_unique<rfaas::rm::SlurmProvider>(cfg.slurm, rm_address, registry);
          loop.attach_provider(provider.get());
          fabric->use_provider(provider.get());
        }
        // The fabric's request latencies go to the REST API's /metrics page.
        rfaas::rm::RestServer rest(loop, rfaas::rm::RestAccess{cfg.admin_token, cfg.read_token,
                                                               cfg.open_health, cfg.open_metrics});
        if (fabric)
          fabric->observe_latencies(&rest.latencies());
        loop.start();
        // Whichever way this scope ends (rest.start() may throw), the loop
        // stops before the fabric and the latencies it uses are destroyed.
        struct StopLoop {
          rfaas::rm::Loop &loop;
          ~StopLoop() { loop.stop(); }
        } stop_loop{loop};
        rest.start(
            cfg.http_host, cfg.http_port, cfg.http_threads,
            rfaas::rm::RestConnectionLimits{cfg.http_max_connections,
                                            std::chrono::milliseconds(cfg.http_idle_timeout_ms)});
        if (fabric)
          std::fprintf(stderr, "resource_manager: fabric on %s (provider %s), %s\n",
                       fabric->address().to_string().c_str(), fabric->provider().c_str(),
                       fabric->auth().describe().c_str());
        std::fprintf(stderr, "resource_manager: ready, REST on http://%s:%u\n",
                     cfg.http_host.c_str(), rest.port());
        std::fflush(stderr);
        logger->info("placement {}, leases {} ms by default (at most {} ms), heartbeat timeout {} "
                     "ms",
                     rfaas::rm::to_string(cfg.registry.policy), cfg.registry.default_lease_ms,
                     cfg.registry.max_lease_ms, cfg.registry.heartbeat_timeout_ms);

        int sig = 0;
        sigwait(&stop_signals, &sig);
        logger->info("{}: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
        rest.stop(); // no new requests; those in flight are answered by the loop
        loop.stop(); // closes the fabric connections on the loop thread
        // The loop has ended: this thread owns the registry now.
        if (provider)
          provider->stop(registry);
        fabric.reset();
        logger->info("stopped");
        return rfaas::cli::kSuccess;
      });
}
